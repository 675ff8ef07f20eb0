from __future__ import annotations

from icemor.cli import main

if __name__ == "__main__":
    main()
