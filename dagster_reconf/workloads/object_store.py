"""A real S3 API on loopback (S3Proxy, over an in-memory store), and the settings Spark and fsspec need to use it.

Why: checkpoints and event logs in object storage are only proven against a server that speaks
the S3 HTTP API, reached the way a cluster reaches S3: Spark through Hadoop's S3A filesystem
(``make s3`` resolves ``hadoop-aws`` into ``.jvm/hadoop-aws``), the control plane through
fsspec's ``s3fs``. S3Proxy is a separate JVM (``make s3`` puts its one self-contained jar in
``.jvm/s3proxy``) that serves requests at once on Jetty's threads, as a store serves many
clients, and keeps its objects in memory: nothing survives :meth:`S3Server.stop`.

Spark and fsspec each take the endpoint their own way, and neither reads the other's: Spark
from ``spark.hadoop.fs.s3a.*`` in the stream's ``spark_conf`` (:meth:`S3Server.spark_conf`),
fsspec from the standard AWS environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...:
:meth:`S3Server.client_env`), which is also how a real deployment configures them.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from dagster_reconf.core.process.process_tree import terminate_process_tree
from dagster_reconf.workloads.jvm import resolved_jars

__all__ = ["S3Server", "S3SetupError", "hadoop_aws_jars"]

LOOPBACK = "127.0.0.1"
REGION = "us-east-1"
# The server's only credentials; they name themselves so that no one mistakes them for real ones.
ACCESS_KEY = "reconf-test-access-key"
SECRET_KEY = "reconf-test-secret-key"
HEAP = "1g"  # the objects of a test or a benchmark: tens of MB


class S3SetupError(RuntimeError):
    """The S3 server did not start, or the S3A jars are missing."""


def s3proxy_jar() -> Path:
    """S3Proxy's self-contained jar, as ``make s3`` resolved it."""
    return resolved_jars("s3proxy", "S3Proxy (the tests' S3 server)", "s3")[0]


def hadoop_aws_jars() -> str:
    """Hadoop's S3A filesystem and the AWS SDK modules it loads, comma-separated for ``spark.jars``."""
    return ",".join(str(jar) for jar in resolved_jars("hadoop-aws", "hadoop-aws (S3A)", "s3"))


class S3Server:
    """An S3 server (S3Proxy) on ``host`` (loopback unless told otherwise), on a free port.

    ``with S3Server(directory) as s3:`` starts it and waits until it answers; leaving the block
    stops its process tree. ``s3.endpoint`` is its URL.
    """

    def __init__(self, directory: Path | str, host: str = LOOPBACK, port: int | None = None) -> None:
        self.directory = Path(directory).resolve()
        self.host = host
        self.port = port or _free_port(host)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.directory / "s3-server.log"

    def start(self, timeout_s: float = 60.0) -> Self:
        if self._process is not None and self._process.poll() is None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        properties = self.directory / "s3proxy.properties"
        properties.write_text(
            "\n".join(
                [
                    f"s3proxy.endpoint=http://{self.host}:{self.port}",
                    "s3proxy.authorization=aws-v2-or-v4",
                    f"s3proxy.identity={ACCESS_KEY}",
                    f"s3proxy.credential={SECRET_KEY}",
                    "jclouds.provider=transient",  # in memory
                    f"jclouds.identity={ACCESS_KEY}",
                    f"jclouds.credential={SECRET_KEY}",
                ]
            )
            + "\n"
        )
        command = ["java", f"-Xmx{HEAP}", "-jar", str(s3proxy_jar()), "--properties", str(properties)]
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise S3SetupError(
                    f"the S3 server ({' '.join(command)}) exited with {self._process.returncode} while starting; "
                    f"see {self.log_file}"
                )
            if self._answers():
                return self
            time.sleep(0.2)
        self.stop()
        raise S3SetupError(f"the S3 server did not answer on {self.endpoint} in {timeout_s:.0f} s; see {self.log_file}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # it answered, with an S3 error for a request without a bucket
        except OSError:
            return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            terminate_process_tree(process.pid, grace_s=10.0)
            process.wait(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @contextmanager
    def as_client_environment(self) -> Iterator[None]:
        """Point this process's boto3 and ``s3fs`` at this server for the block: the AWS environment set, and the
        S3 filesystems fsspec keeps dropped before and after (each read the environment once, when it was made, so
        one kept from another server would still call that one)."""
        from s3fs import S3FileSystem

        saved = {key: os.environ.get(key) for key in self.client_env()}
        os.environ.update(self.client_env())
        S3FileSystem.clear_instance_cache()
        try:
            yield
        finally:
            S3FileSystem.clear_instance_cache()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def client_env(self) -> dict[str, str]:
        """The standard AWS environment that points boto3 and ``s3fs`` (the control plane) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
        }

    def spark_conf(self) -> dict[str, str]:
        """The ``spark_conf`` a stream needs to keep its checkpoint and event logs here through ``s3a://``.

        Path-style requests, because a bucket cannot be a subdomain of an IP address; plain HTTP, as the
        server speaks it.

        The credentials travel in the configuration so that executors on other hosts have them too: these
        are the server's made-up ones (a real deployment names a credentials provider instead).
        """
        return {
            "spark.jars": hadoop_aws_jars(),
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
        }

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (if it is new) and return its ``s3a://`` URL."""
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        try:
            client.create_bucket(Bucket=name)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        return f"s3a://{name}"


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
