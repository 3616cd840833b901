"""Free TCP ports on the loopback interface, for tests that start process groups or rendezvous."""
import socket
from contextlib import ExitStack
from typing import List


def free_port() -> int:
    """A port nothing listens on now (the operating system's pick)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def free_ports(count: int) -> List[int]:
    """`count` different ports nothing listens on now, for process groups that run at the same time (each socket is
    held until all are picked, so the operating system cannot pick one twice)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(('127.0.0.1', 0))
        return [s.getsockname()[1] for s in sockets]
