"""A kazoo peer for zk-recipes' interop tests and benchmarks. Runs under Debian's /usr/bin/python3.

    kazoo_peer.py lock  CONNECT PATH ROUNDS COUNTER EVENTS OCCUPANCY ID SESSION_MS
    kazoo_peer.py hold  CONNECT PATH ID SESSION_MS [lock|read|write]
                                    (prints HOLDING <seq>; releases on stdin EOF or "release")
    kazoo_peer.py contend CONNECT PATH N CS_MICROS OUT SESSION_MS [RECIPE]
        N threads, each with its own session, loop acquire -> critical section -> release from
        "go" to "stop" on stdin; each writes "ACQUIRED_NS RELEASING_NS" lines
        (time.monotonic_ns, CLOCK_MONOTONIC) to OUT; prints READY, then DONE; exits on "exit".
        RECIPE: mutex (the default; the critical section spins), semaphore:LEASES (Semaphore),
        rw:READ_PERCENT (ReadLock/WriteLock; operation k of thread i reads when
        (k + i) % 10 < READ_PERCENT / 10; lines end " r" or " w"), election (Election.run, a
        term per run, its function returning); their critical sections sleep.
    kazoo_peer.py elect CONNECT PATH ID SESSION_MS   (as CuratorPeer's elect mode, with Election)
    kazoo_peer.py queue CONNECT PATH N SESSION_MS [TOTAL HOLD]   (as CuratorPeer's queue mode)
    kazoo_peer.py many CONNECT PREFIX LOCKS THREADS SECONDS SESSION_MS   (as CuratorPeer's many mode)
    kazoo_peer.py order CONNECT PATH SESSION_MS     (prints NODE <data> per contender in kazoo's order, then END)

`lock` mode follows the same protocol as CuratorPeer.java: exclusive OCCUPANCY file (exit 3 on
overlap), "enter ID SEQ" / "exit ID SEQ" lines in EVENTS, a read-modify-write COUNTER.
"""

import os
import re
import sys
import threading
import time

from kazoo.client import KazooClient

SEQ = re.compile(r"(-?\d{10})$")


def connect(hosts, session_ms):
    client = KazooClient(hosts=hosts, timeout=session_ms / 1000.0)
    client.start(timeout=30)
    return client


def append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


def wait_for_stdin(word):
    for line in sys.stdin:
        if line.strip() == word:
            return


def critical(cs_ns, sleep):
    """The critical section: spun for the mutex (as ever), slept for the other recipes."""
    if cs_ns <= 0:
        return
    if sleep:
        time.sleep(cs_ns / 1e9)
        return
    until = time.monotonic_ns() + cs_ns
    while time.monotonic_ns() < until:
        pass


def is_read(i, k, read_percent):
    """Whether contender i's k-th operation of a read/write mix is a read (the bench's rule)."""
    return (k + i) % 10 < read_percent // 10


def contend(client, path, recipe, i, cs_ns, stop, log):
    """Contender i of contend mode until stop: RECIPE is mutex, semaphore:LEASES,
    rw:READ_PERCENT or election (a term per Election.run, whose function returns)."""
    kind, _, arg = recipe.partition(":")
    ident = "bench-%d" % i
    if kind == "election":
        election = client.Election(path, ident)

        def lead():
            acquired = time.monotonic_ns()
            critical(cs_ns, True)
            log.append("%d %d" % (acquired, time.monotonic_ns()))

        while not stop.is_set():
            election.run(lead)
        return
    if kind == "mutex":
        lock = client.Lock(path, ident)
        pick = lambda k: (lock, "")
    elif kind == "semaphore":
        sem = client.Semaphore(path, ident, max_leases=int(arg))
        pick = lambda k: (sem, "")
    elif kind == "rw":
        read, write = client.ReadLock(path, ident), client.WriteLock(path, ident)
        pick = lambda k: (read, " r") if is_read(i, k, int(arg)) else (write, " w")
    else:
        raise SystemExit("unknown recipe " + recipe)
    k = 0
    while not stop.is_set():
        lock, tag = pick(k)
        k += 1
        lock.acquire()
        acquired = time.monotonic_ns()
        critical(cs_ns, kind != "mutex")
        releasing = time.monotonic_ns()
        lock.release()
        log.append("%d %d%s" % (acquired, releasing, tag))


def main():
    mode = sys.argv[1]
    if mode == "lock":
        hosts, path, rounds, counter, events, occupancy, ident, session = sys.argv[2:10]
        client = connect(hosts, int(session))
        lock = client.Lock(path, ident)
        for _ in range(int(rounds)):
            lock.acquire()
            seq = int(SEQ.search(lock.node).group(1))
            try:
                fd = os.open(occupancy, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.close(fd)
            except FileExistsError:
                print("OVERLAP " + ident, flush=True)
                os._exit(3)
            append(events, "enter %s %d" % (ident, seq))
            data, stat = client.get(counter)
            client.set(counter, str(int(data.decode().strip()) + 1).encode())
            os.unlink(occupancy)
            append(events, "exit %s %d" % (ident, seq))
            lock.release()
        client.stop()
        print("DONE", flush=True)
    elif mode == "hold":
        hosts, path, ident, session = sys.argv[2:6]
        kind = sys.argv[6] if len(sys.argv) > 6 else "lock"
        client = connect(hosts, int(session))
        lock = {"lock": client.Lock, "read": client.ReadLock, "write": client.WriteLock}[kind](path, ident)
        lock.acquire()
        print("HOLDING %d" % int(SEQ.search(lock.node).group(1)), flush=True)
        wait_for_stdin("release")
        lock.release()
        client.stop()
        print("RELEASED", flush=True)
    elif mode == "contend":
        hosts, path, n, cs_us, out, session = sys.argv[2:8]
        recipe = sys.argv[8] if len(sys.argv) > 8 else "mutex"
        n, cs_ns = int(n), int(cs_us) * 1000
        clients = [connect(hosts, int(session)) for _ in range(n)]
        go, stop = threading.Event(), threading.Event()
        logs = [[] for _ in range(n)]

        def contender(i):
            go.wait()
            contend(clients[i], path, recipe, i, cs_ns, stop, logs[i])

        threads = [threading.Thread(target=contender, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        print("READY", flush=True)
        wait_for_stdin("go")
        go.set()
        wait_for_stdin("stop")
        stop.set()
        for t in threads:
            t.join()
        with open(out, "w") as f:
            for log in logs:
                for line in log:
                    f.write(line + "\n")
        print("DONE", flush=True)
        wait_for_stdin("exit")
        for c in clients:
            c.stop()
    elif mode == "elect":
        hosts, path, ident, session = sys.argv[2:6]
        client = connect(hosts, int(session))
        forever = threading.Event()

        def lead():
            print("LEADER %d" % time.monotonic_ns(), flush=True)
            forever.wait()

        threading.Thread(target=client.Election(path, ident).run, args=(lead,), daemon=True).start()
        print("STARTED", flush=True)
        wait_for_stdin("quit")
        os._exit(0)
    elif mode == "order":
        hosts, path, session = sys.argv[2:5]
        client = connect(hosts, int(session))
        # Lock.contenders() is kazoo's own order; each test node holds its name as data.
        for name in client.Lock(path).contenders():
            print("NODE " + name, flush=True)
        print("END", flush=True)
        client.stop()
    elif mode == "queue":
        hosts, path, n, session = sys.argv[2:6]
        n = int(n)
        total = int(sys.argv[6]) if len(sys.argv) > 6 else n + 1
        holds = len(sys.argv) <= 7 or sys.argv[7] == "1"
        client = connect(hosts, int(session))
        holder = client.Lock(path, "holder")
        if holds:
            holder.acquire()
        print("BASE", flush=True)
        wait_for_stdin("spawn")
        done = threading.Semaphore(0)
        held = [(0, 0)] * n

        def waiter(i):
            lock = client.Lock(path, "w%d" % i)
            lock.acquire()
            t = time.monotonic_ns()
            held[i] = (t, time.monotonic_ns())
            lock.release()
            done.release()

        for i in range(n):
            threading.Thread(target=waiter, args=(i,), daemon=True).start()
        while len(client.get_children(path)) < total:
            time.sleep(0.02)
        print("QUEUED", flush=True)
        wait_for_stdin("go")
        t0 = time.monotonic_ns()
        if holds:
            holder.release()
        for _ in range(n):
            done.acquire()
        t1 = time.monotonic_ns()
        sys.stdout.write("".join("HOLD %d %d\n" % h for h in held))
        print("DRAINED_NS %d" % (t1 - t0), flush=True)
        wait_for_stdin("exit")
        client.stop()
    elif mode == "many":
        hosts, prefix, locks, nthreads, seconds, session = sys.argv[2:8]
        locks, nthreads = int(locks), int(nthreads)
        client = connect(hosts, int(session))
        counts = [0] * nthreads
        print("READY", flush=True)
        wait_for_stdin("go")
        end = time.monotonic() + float(seconds)

        def cycler(start):
            i = start
            while time.monotonic() < end:
                lock = client.Lock("%s/l%d" % (prefix, i % locks), "many-%d" % start)
                lock.acquire()
                lock.release()
                counts[start] += 1
                i += nthreads

        threads = [threading.Thread(target=cycler, args=(t,)) for t in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("COUNT %d" % sum(counts), flush=True)
        wait_for_stdin("exit")
        client.stop()
    else:
        sys.stderr.write("unknown mode %s\n" % mode)
        sys.exit(2)


if __name__ == "__main__":
    main()
