"""A free TCP port on the loopback interface, for tests that start process groups or rendezvous."""
import socket


def free_port() -> int:
    """A port nothing listens on now (the operating system's pick)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]
