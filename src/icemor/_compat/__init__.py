"""Every private name icemor borrows from a dependency lives in this package, one module each."""
