"""Accepting on a listening socket that a node's worker processes share.

The supervisor binds one socket and every worker adopts it (objstore/prefork). twisted's
`Port` accepts up to `numberAccepts` connections each time its socket is readable (100 at
first, growing by 20 whenever it took that many), so the worker woken first by a burst of
connections takes all of them. A client that opens its pool at once then has every
kept-alive connection on one worker while the others idle: `ab -k -c 32` HEADs on a
two-worker node spent 5.3 s of one worker's CPU in 5 s and 0.05 s of the other's, at half
the rate of both.

`accept_one_per_wakeup` pins a port to one accept each time its socket is readable, as
nginx does without `multi_accept`: each worker the socket wakes takes one connection and
goes back to its loop, so a burst is spread over the workers by how busy each one is. A
connection costs a wake-up more under connect storms, no more.
"""

from __future__ import annotations

from typing import Any


def accept_one_per_wakeup(port: Any) -> None:
    """Make the listening `port` (a twisted.internet.tcp.Port) accept at most one
    connection each time the reactor finds its socket readable. twisted resets
    `numberAccepts` after every read, so it is set again before each one."""
    read = port.doRead

    def one_at_a_time() -> Any:
        port.numberAccepts = 1
        return read()

    port.numberAccepts = 1
    port.doRead = one_at_a_time
