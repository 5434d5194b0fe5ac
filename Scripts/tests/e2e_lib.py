"""What the end-to-end scripts share: free loopback ports, and waiting for a condition."""
import socket
import subprocess
import time


def issue_certificates(node, tls, names, client_port=lambda name: name.startswith("gateway")):
    """A test CA in `tls` (`parley-node certs`), a certificate for each node of `names`, and a
    client-port certificate for those `client_port` picks."""
    subprocess.run([node, "certs", "init", "--dir", tls], check=True, stdout=subprocess.DEVNULL)
    for name in names:
        subprocess.run([node, "certs", "issue", name, "--dir", tls], check=True, stdout=subprocess.DEVNULL)
        if client_port(name):
            subprocess.run([node, "certs", "issue", name, "--client", "--dir", tls], check=True, stdout=subprocess.DEVNULL)


def free_ports(n):
    """N loopback ports free right now (bound at once, then released together)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_until(seconds, predicate):
    """Whether `predicate` came true within `seconds` (an exception counts as not yet)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if predicate():
                return True
        except Exception:
            pass
        time.sleep(0.1)
    return False
