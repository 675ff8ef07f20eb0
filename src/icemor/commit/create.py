"""Create a table: staged, its location checked, then committed through the door.

The catalog stages the create (it chooses the table's location and writes nothing), the caller
checks that location, and the staged table's updates are committed with ``AssertCreate`` by
:func:`icemor.commit.door.create`: a create whose outcome is unknown is recognised by the staged
table's uuid. A catalog that refuses staging (REST servers without ``stage-create``: HTTP 400, 405,
406, 422 or 501) gets a plain create instead; its location is checked after, and a refused location
drops the new table again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.exceptions import TableAlreadyExistsError

from icemor._compat.pyiceberg import staged_create_changes, v3_metadata_json
from icemor.commit.door import classify, create, fail, http_status

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.catalog import Catalog
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import CreateTableTransaction
    from pyiceberg.table import Table as PyIcebergTable

__all__ = ["create_table"]

# what REST servers without staged creation answer to ``stage-create``: 400 (AWS Glue: "Stage
# create is not supported"), 406 (UnsupportedOperationException), 422 (lakana-server: "Staged table
# creation is not implemented."), 405, 501 (not implemented). A create refused for another reason
# is refused again, with its own answer, by the plain create that follows.
_NO_STAGING = (400, 405, 406, 422, 501)


def create_table(
    catalog: Catalog,
    identifier: str,
    parts: Sequence[str],
    *,
    schema: Schema,
    partition_spec: PartitionSpec,
    properties: dict[str, str],
    check: Callable[[str], None],
) -> PyIcebergTable:
    """Create ``identifier`` (``parts``: its checked namespace levels and name) at the location the
    catalog chooses, once ``check(location)`` accepts it.

    Raises:
        TableAlreadyExistsError: The table exists (nothing created).
        CommitFailedError: The catalog refused the create (nothing created).
        CommitStateUnknownError: The create failed in a way that leaves unknown whether it happened.
        Whatever ``check`` raises: nothing is left created.
    """
    what = f"creating {identifier}"
    with v3_metadata_json():  # pyiceberg 0.12 builds and serialises v3 metadata only inside it
        try:
            transaction = _stage(catalog, identifier, parts, schema, partition_spec, properties)
        except TableAlreadyExistsError:
            raise
        except Exception as e:
            # pyiceberg raises NotImplementedError for HTTP 501, and catalogs without staging too
            if not isinstance(e, NotImplementedError) and http_status(e) not in _NO_STAGING:
                _fail_rest(catalog, e, what)
                raise
            return _plain_create(catalog, identifier, schema, partition_spec, properties, check, what)
        staged, updates = staged_create_changes(transaction)
        check(staged.metadata.location)
        create(catalog, staged, updates, what=what)
    return catalog.load_table(staged.name())


def _stage(
    catalog: Catalog,
    identifier: str,
    parts: Sequence[str],
    schema: Schema,
    spec: PartitionSpec,
    properties: dict[str, str],
) -> CreateTableTransaction:
    # a copy of the properties: pyiceberg pops format-version from those it is given
    try:
        return catalog.create_table_transaction(
            identifier, schema=schema, partition_spec=spec, properties=dict(properties)
        )
    except ValueError as e:
        if http_status(e) is not None:
            raise
        # pyiceberg's staging takes (namespace, table) only, while the SQL catalog's create_table
        # keeps a nested namespace as one dotted name: stage it under that name
        namespace = ".".join(parts[:-1])
        return catalog.create_table_transaction(
            (namespace, parts[-1]), schema=schema, partition_spec=spec, properties=dict(properties)
        )


def _plain_create(
    catalog: Catalog,
    identifier: str,
    schema: Schema,
    spec: PartitionSpec,
    properties: dict[str, str],
    check: Callable[[str], None],
    what: str,
) -> PyIcebergTable:
    """Create without staging (the catalog refused it), then check the location it chose."""
    try:
        table = catalog.create_table(
            identifier, schema=schema, partition_spec=spec, properties=dict(properties)
        )
    except TableAlreadyExistsError:
        raise
    except Exception as e:
        _fail_rest(catalog, e, what)
        raise
    try:
        check(table.metadata.location)
    except BaseException:
        _drop_quietly(catalog, identifier)
        raise
    return table


def _fail_rest(catalog: Catalog, e: Exception, what: str) -> None:
    """Raise a REST catalog's answer (an HTTP status) as icemor's one-line error; else return."""
    if http_status(e) is not None:
        fail(classify(catalog, e, None), e, what)


def _drop_quietly(catalog: Catalog, identifier: str) -> None:
    """Drop a table this create made, with its files (best effort: the error raised matters more)."""
    try:
        catalog.purge_table(identifier)
    except Exception:
        try:
            catalog.drop_table(identifier)
        except Exception:  # e.g. the catalog refuses drops: the table then stays, and the error says why
            return
