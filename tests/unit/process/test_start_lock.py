"""Starts of one stream are serialized by a lock file that lives only while a start holds it."""

import threading
import time

from dagster_reconf.core.process.supervisor import _start_lock


def test_starts_of_one_stream_take_turns_and_leave_no_lock_file(tmp_path):
    lock = tmp_path / "streams" / ".orders.start.lock"
    held: list[str] = []

    def start(who: str, hold_s: float) -> None:
        with _start_lock(tmp_path, "orders"):
            held.append(f"{who} in")
            time.sleep(hold_s)
            held.append(f"{who} out")

    first = threading.Thread(target=start, args=("first", 0.5))
    first.start()
    time.sleep(0.1)
    assert lock.exists()
    waiters = [threading.Thread(target=start, args=(f"w{i}", 0.1)) for i in range(3)]
    for waiter in waiters:  # they wait on the first's file, which it removes before letting go
        waiter.start()
    first.join()
    for waiter in waiters:
        waiter.join()
    assert held[:2] == ["first in", "first out"]
    assert all(held[i].endswith(" in") and held[i + 1] == held[i].replace(" in", " out") for i in range(0, 8, 2))
    assert not lock.exists()


def test_a_start_that_fails_leaves_no_lock_file(tmp_path):
    try:
        with _start_lock(tmp_path, "orders"):
            raise RuntimeError("the definition did not import")
    except RuntimeError:
        pass
    assert list((tmp_path / "streams").iterdir()) == []
