"""An S3 API server for the tests: moto's, in this process, on 127.0.0.1 (no other network).

:class:`S3Server` starts it on a free port and gives what a client needs: the pyiceberg FileIO
properties (``s3.*``) of icemor's catalog, a boto3 client to list a bucket independently of
pyiceberg and pyarrow, and the keys every table file the metadata references maps to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.table import Table as PyIcebergTable

# moto accepts any credentials; these never leave 127.0.0.1
ACCESS_KEY = "icemor-test"
SECRET_KEY = "icemor-test-secret"
REGION = "us-east-1"


class S3Server:
    """moto's S3 server in a thread of this process, on 127.0.0.1 and a port the OS picks."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.stop()

    def client(self) -> Any:
        """A boto3 S3 client of the server (path-style addressing: no DNS for bucket names)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}),
        )

    def properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for the server (PyArrowFileIO reads these ``s3.*`` keys)."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET_KEY,
            "s3.region": REGION,
            "s3.path-style-access": "true",
        }

    def objects(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Every object of ``bucket`` under ``prefix`` (key -> size), listed by boto3 (all pages)."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", ())}

    def keys(self, bucket: str, prefix: str = "") -> set[str]:
        """The files of ``bucket`` under ``prefix``: every object but empty directory markers.

        pyarrow's S3FileSystem emulates directories: deleting a directory's last file puts an
        empty ``dir/`` object in its place. No table metadata names those; they hold no data.
        """
        found = self.objects(bucket, prefix)
        markers = {k for k in found if k.endswith("/")}
        assert all(found[k] == 0 for k in markers), "a key ending in / that holds data"
        return set(found) - markers


def split(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key)."""
    scheme, _, rest = uri.partition("://")
    assert scheme in ("s3", "s3a"), uri
    bucket, _, key = rest.partition("/")
    return bucket, key


def referenced_keys(table: PyIcebergTable, *, live: bool = False) -> set[str]:
    """The key of every file the table's metadata references, read with pyiceberg alone:
    metadata JSON (current and logged), manifest lists, manifests, and the data and delete
    files of their entries. ``live``: not those of DELETED entries, whose files expiry may
    have removed (every file a DELETED entry names may still be there, none must be)."""
    metadata, io = table.metadata, table.io
    uris = {table.metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    for snapshot in metadata.snapshots:
        uris.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            uris.add(manifest.manifest_path)
            uris.update(
                e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=live)
            )
    return {split(u)[1] for u in uris}
