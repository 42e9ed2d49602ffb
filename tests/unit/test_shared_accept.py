"""accept_one_per_wakeup pins a port to one accept per read, whatever twisted's Port does to
`numberAccepts` after a read (tests/integration/test_workers.py has the burst over real
workers)."""

from __future__ import annotations

from twisted.internet import tcp

from objstore.http.shared_accept import accept_one_per_wakeup


class FakePort:
    """Reads as twisted's Port: accepts up to numberAccepts, then grows it by 20 when it
    took that many."""

    def __init__(self, waiting: int) -> None:
        self.numberAccepts = 100
        self.waiting = waiting
        self.taken: list[int] = []

    def doRead(self) -> None:  # noqa: N802 (Twisted's)
        taken = min(self.waiting, self.numberAccepts)
        self.waiting -= taken
        self.taken.append(taken)
        if taken == self.numberAccepts:
            self.numberAccepts += 20


def test_every_read_accepts_one_connection() -> None:
    port = FakePort(waiting=5)
    accept_one_per_wakeup(port)
    for _ in range(5):
        port.doRead()
    assert port.taken == [1, 1, 1, 1, 1]


def test_twisted_port_reads_through_the_attribute_the_pin_replaces() -> None:
    # The pin relies on Port reading `self.numberAccepts` at each read (and setting it
    # afterwards), as twisted does: a twisted that stopped would make the pin a no-op.
    assert "numberAccepts" in tcp.Port.doRead.__code__.co_names
