"""The kazoo side of zk-bench's fleet scenario: COUNT sessions in one process, each a
KazooClient, following the phases zk-bench announces on stdin. Runs under Debian's /usr/bin/python3.

    kazoo_fleet.py CONNECT PREFIX FIRST COUNT SESSION_MS
        connects sessions FIRST..FIRST+COUNT, prints READY; then, on stdin:
        hold   session g takes Lock PREFIX/l<g>; prints HELD once every one holds
        half   every odd g releases its lock and queues for PREFIX/l<g-1>; prints WAITING
        count  prints HOLDING <sessions holding a lock now>
        exit   closes its sessions and exits

(the protocol of bench/src/peers/fleet.rs, which its Rust and Curator drivers speak too).
"""

import os
import sys
import threading

from kazoo.client import KazooClient


def main():
    hosts, prefix, first, count, session_ms = sys.argv[1:6]
    first, count = int(first), int(count)
    clients = [KazooClient(hosts=hosts, timeout=int(session_ms) / 1000.0) for _ in range(count)]
    for c in clients:
        c.start(timeout=60)
    holding = [0]
    guard = threading.Lock()

    def add(d):
        with guard:
            holding[0] += d

    def take(lock):
        try:
            lock.acquire()
        except Exception:  # the sessions closing at the end; a failure shows in the count
            return
        add(1)

    own = [None] * count
    print("READY", flush=True)
    for line in sys.stdin:
        word = line.strip()
        if word == "hold":
            threads = []
            for i in range(count):
                own[i] = clients[i].Lock("%s/l%d" % (prefix, first + i))
                threads.append(threading.Thread(target=take, args=(own[i],), daemon=True))
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print("HELD", flush=True)
        elif word == "half":
            for i in range(count):
                g = first + i
                if g % 2 == 1:
                    own[i].release()
                    add(-1)
                    # Admitted beside its holder only if the lock is broken: the count says so.
                    nxt = clients[i].Lock("%s/l%d" % (prefix, g - 1))
                    threading.Thread(target=take, args=(nxt,), daemon=True).start()
            print("WAITING", flush=True)
        elif word == "count":
            with guard:
                print("HOLDING %d" % holding[0], flush=True)
        elif word == "exit":
            break
    for c in clients:
        c.stop()
        c.close()
    os._exit(0)


main()
