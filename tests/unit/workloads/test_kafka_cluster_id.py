"""The KRaft cluster id the bundled broker formats its storage with."""

import base64

from dagster_reconf.workloads.kafka import _cluster_id


def test_cluster_ids_are_16_bytes_and_never_read_as_an_option():
    ids = [_cluster_id() for _ in range(5000)]  # about 78 would start with "-" if drawn plainly
    assert not any(i.startswith("-") for i in ids)
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids) and len(set(ids)) == len(ids)
