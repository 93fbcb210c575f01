// A Curator 5.x peer for zk-recipes' interop tests and benchmarks.
//
//   java CuratorPeer lock  CONNECT PATH ROUNDS COUNTER EVENTS OCCUPANCY ID SESSION_MS
//   java CuratorPeer hold  CONNECT PATH ID SESSION_MS      (prints HOLDING <seq>; releases on stdin EOF or "release")
//   java CuratorPeer revocable CONNECT PATH ID SESSION_MS (as hold, made revocable: prints REVOCATION REQUESTED)
//   java CuratorPeer revoke CONNECT NODE_PATH SESSION_MS  (Curator's Revoker.attemptRevoke; prints REVOKED)
//   java CuratorPeer order CONNECT PATH SESSION_MS     (prints NODE <name> per child in Curator's lock order, then END)
//   java CuratorPeer latch CONNECT PATH ID SESSION_MS      (prints LEADER / NOT_LEADER; quits on stdin EOF or "quit")
//   java CuratorPeer elect CONNECT PATH ID SESSION_MS latch|selector
//       joins an election (a LeaderLatch, or a LeaderSelector whose takeLeadership never returns),
//       prints STARTED, then "LEADER <System.nanoTime>" when it leads; quits on "quit" or stdin EOF
//       (the bench kills it instead, to measure a failover).
//   java CuratorPeer contend CONNECT PATH N CS_MICROS OUT SESSION_MS [RECIPE]
//       N threads, each with its own session, loop acquire -> critical section -> release from
//       "go" to "stop" on stdin; each writes "ACQUIRED_NS RELEASING_NS" lines (System.nanoTime,
//       CLOCK_MONOTONIC) to OUT; prints READY, then DONE; exits on "exit". RECIPE: mutex (the
//       default; the critical section spins), semaphore:LEASES (InterProcessSemaphoreV2),
//       rw:READ_PERCENT (InterProcessReadWriteLock; operation k of thread i reads when
//       (k + i) % 10 < READ_PERCENT / 10; lines end " r" or " w"), latch (a new LeaderLatch per
//       term, left with close()), selector (an auto-requeued LeaderSelector whose takeLeadership
//       returns); a hold is a term for the last two; their critical sections sleep.
//   java CuratorPeer many CONNECT PREFIX LOCKS THREADS SECONDS SESSION_MS
//       THREADS threads share one session, cycling acquire/release over LOCKS paths; prints COUNT <n>.
//   java CuratorPeer queue CONNECT PATH N SESSION_MS [TOTAL HOLD]
//       one session holds the lock, prints BASE, and on "spawn" queues N threads behind it; prints
//       QUEUED once PATH has TOTAL children (default N + 1), then on "go" releases and, once all N
//       have acquired and released, prints HOLD <acquired> <releasing> (nanoTime) per waiter and
//       DRAINED_NS <ns>. HOLD 0 takes no holder: one of several processes queueing behind another's.
//
// In `lock` mode each round takes InterProcessMutex, creates OCCUPANCY exclusively (it exits 3
// if another process is inside), appends "enter ID SEQ" to EVENTS, increments the COUNTER node
// read-modify-write, removes OCCUPANCY, appends "exit ID SEQ", and releases.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.RetryNTimes;

public class CuratorPeer {
    static CuratorFramework connect(String connect, int sessionMs) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(connect)
            .sessionTimeoutMs(sessionMs)
            .connectionTimeoutMs(Math.min(sessionMs, 15000))
            .retryPolicy(new RetryNTimes(100, 100))
            .build();
        client.start();
        client.blockUntilConnected();
        return client;
    }

    /** The holder's node is the first participant; while we hold, that is ours. */
    static long heldSeq(InterProcessMutex mutex) throws Exception {
        String node = mutex.getParticipantNodes().iterator().next();
        return Long.parseLong(node.substring(node.lastIndexOf("lock-") + 5));
    }

    static void append(Path file, String line) throws Exception {
        Files.write(file, (line + "\n").getBytes(StandardCharsets.UTF_8), StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    static void waitForStdin(String word) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.trim().equals(word)) {
                return;
            }
        }
    }

    /** One contender of `contend` mode, from "go" until `stop` (or `stopped`) and its last cycle. */
    interface Contender {
        void run(java.util.concurrent.atomic.AtomicBoolean stop, java.util.concurrent.CountDownLatch stopped) throws Exception;
    }

    /** The critical section: spun for the mutex (as ever), slept for the other recipes. */
    static void critical(long csNanos, boolean sleep) throws InterruptedException {
        if (csNanos <= 0) {
            return;
        }
        if (sleep) {
            Thread.sleep(csNanos / 1_000_000L, (int) (csNanos % 1_000_000L));
            return;
        }
        long until = System.nanoTime() + csNanos;
        while (System.nanoTime() < until) { Thread.onSpinWait(); }
    }

    /** "ACQUIRED_NS RELEASING_NS[ KIND]". */
    static void logHold(StringBuilder log, long acquired, long releasing, String kind) {
        synchronized (log) {
            log.append(acquired).append(' ').append(releasing);
            if (kind != null) { log.append(' ').append(kind); }
            log.append('\n');
        }
    }

    /** Whether contender `i`'s `k`-th operation of a read/write mix is a read (the bench's rule). */
    static boolean isRead(int i, long k, int readPercent) {
        return (k + i) % 10 < readPercent / 10;
    }

    /** Contender `i` of `contend` mode for RECIPE: mutex, semaphore:LEASES, rw:READ_PERCENT, latch, selector. */
    static Contender contender(CuratorFramework client, String path, String recipe, int i, long csNanos, StringBuilder log) throws Exception {
        String[] parts = recipe.split(":");
        switch (parts[0]) {
            case "mutex": {
                InterProcessMutex mutex = new InterProcessMutex(client, path);
                return (stop, stopped) -> {
                    while (!stop.get()) {
                        mutex.acquire();
                        long acquired = System.nanoTime();
                        critical(csNanos, false);
                        long releasing = System.nanoTime();
                        mutex.release();
                        logHold(log, acquired, releasing, null);
                    }
                };
            }
            case "semaphore": {
                InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, path, Integer.parseInt(parts[1]));
                return (stop, stopped) -> {
                    while (!stop.get()) {
                        Lease lease = sem.acquire();
                        long acquired = System.nanoTime();
                        critical(csNanos, true);
                        long releasing = System.nanoTime();
                        sem.returnLease(lease);
                        logHold(log, acquired, releasing, null);
                    }
                };
            }
            case "rw": {
                int readPercent = Integer.parseInt(parts[1]);
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
                return (stop, stopped) -> {
                    for (long k = 0; !stop.get(); k++) {
                        boolean read = isRead(i, k, readPercent);
                        InterProcessMutex lock = read ? rw.readLock() : rw.writeLock();
                        lock.acquire();
                        long acquired = System.nanoTime();
                        critical(csNanos, true);
                        long releasing = System.nanoTime();
                        lock.release();
                        logHold(log, acquired, releasing, read ? "r" : "w");
                    }
                };
            }
            case "latch": {
                // A term: a new latch joins, leads, and leaves with close() (a latch can't restart).
                return (stop, stopped) -> {
                    while (!stop.get()) {
                        LeaderLatch latch = new LeaderLatch(client, path, "bench-" + i);
                        latch.start();
                        latch.await();
                        long acquired = System.nanoTime();
                        critical(csNanos, true);
                        long releasing = System.nanoTime();
                        latch.close();
                        logHold(log, acquired, releasing, null);
                    }
                };
            }
            case "selector": {
                // A term: takeLeadership runs and returns; autoRequeue queues the selector again.
                LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
                    public void takeLeadership(CuratorFramework c) throws Exception {
                        long acquired = System.nanoTime();
                        critical(csNanos, true);
                        logHold(log, acquired, System.nanoTime(), null);
                    }
                });
                selector.setId("bench-" + i);
                selector.autoRequeue();
                return (stop, stopped) -> {
                    selector.start();
                    stopped.await();
                    selector.close();
                };
            }
            default:
                throw new IllegalArgumentException("unknown recipe " + recipe);
        }
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        switch (mode) {
            case "lock": {
                CuratorFramework client = connect(args[1], Integer.parseInt(args[8]));
                InterProcessMutex mutex = new InterProcessMutex(client, args[2]);
                int rounds = Integer.parseInt(args[3]);
                String counter = args[4];
                Path events = Paths.get(args[5]);
                Path occupancy = Paths.get(args[6]);
                String id = args[7];
                for (int i = 0; i < rounds; i++) {
                    mutex.acquire();
                    long seq = heldSeq(mutex);
                    try {
                        Files.createFile(occupancy);
                    } catch (FileAlreadyExistsException e) {
                        System.out.println("OVERLAP " + id);
                        System.exit(3);
                    }
                    append(events, "enter " + id + " " + seq);
                    long n = Long.parseLong(new String(client.getData().forPath(counter), StandardCharsets.UTF_8).trim());
                    client.setData().forPath(counter, Long.toString(n + 1).getBytes(StandardCharsets.UTF_8));
                    Files.delete(occupancy);
                    append(events, "exit " + id + " " + seq);
                    mutex.release();
                }
                client.close();
                System.out.println("DONE");
                break;
            }
            case "order": {
                CuratorFramework client = connect(args[1], Integer.parseInt(args[3]));
                for (String node : new InterProcessMutex(client, args[2]).getParticipantNodes()) {
                    System.out.println("NODE " + node.substring(node.lastIndexOf('/') + 1));
                }
                client.close();
                System.out.println("END");
                break;
            }
            case "hold": {
                CuratorFramework client = connect(args[1], Integer.parseInt(args[4]));
                InterProcessMutex mutex = new InterProcessMutex(client, args[2]);
                mutex.acquire();
                System.out.println("HOLDING " + heldSeq(mutex));
                System.out.flush();
                waitForStdin("release");
                mutex.release();
                client.close();
                System.out.println("RELEASED");
                break;
            }
            case "revocable": {
                // A holder built with makeRevocable: reports a revocation request, releases on "release".
                CuratorFramework client = connect(args[1], Integer.parseInt(args[4]));
                InterProcessMutex mutex = new InterProcessMutex(client, args[2]);
                mutex.makeRevocable(m -> {
                    System.out.println("REVOCATION REQUESTED");
                    System.out.flush();
                });
                mutex.acquire();
                System.out.println("HOLDING " + heldSeq(mutex));
                System.out.flush();
                waitForStdin("release");
                mutex.release();
                client.close();
                System.out.println("RELEASED");
                break;
            }
            case "revoke": {
                // Curator's Revoker on one lock node.
                CuratorFramework client = connect(args[1], Integer.parseInt(args[3]));
                Revoker.attemptRevoke(client, args[2]);
                client.close();
                System.out.println("REVOKED");
                break;
            }
            case "latch": {
                CuratorFramework client = connect(args[1], Integer.parseInt(args[4]));
                LeaderLatch latch = new LeaderLatch(client, args[2], args[3]);
                latch.addListener(new LeaderLatchListener() {
                    public void isLeader() {
                        System.out.println("LEADER");
                        System.out.flush();
                    }

                    public void notLeader() {
                        System.out.println("NOT_LEADER");
                        System.out.flush();
                    }
                });
                latch.start();
                System.out.println("STARTED");
                System.out.flush();
                waitForStdin("quit");
                latch.close();
                client.close();
                break;
            }
            case "elect": {
                CuratorFramework client = connect(args[1], Integer.parseInt(args[4]));
                String path = args[2], id = args[3];
                if (args[5].equals("latch")) {
                    LeaderLatch latch = new LeaderLatch(client, path, id);
                    latch.addListener(new LeaderLatchListener() {
                        public void isLeader() {
                            System.out.println("LEADER " + System.nanoTime());
                            System.out.flush();
                        }

                        public void notLeader() {}
                    });
                    latch.start();
                } else {
                    LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
                        public void takeLeadership(CuratorFramework c) throws Exception {
                            System.out.println("LEADER " + System.nanoTime());
                            System.out.flush();
                            Thread.sleep(Long.MAX_VALUE);
                        }
                    });
                    selector.setId(id);
                    selector.start();
                }
                System.out.println("STARTED");
                System.out.flush();
                waitForStdin("quit");
                break;
            }
            case "contend": {
                String connect = args[1], path = args[2];
                int n = Integer.parseInt(args[3]);
                long csNanos = Long.parseLong(args[4]) * 1000L;
                Path out = Paths.get(args[5]);
                int sessionMs = Integer.parseInt(args[6]);
                String recipe = args.length > 7 ? args[7] : "mutex";
                // Sessions connect in parallel: one after another, 128 of them take seconds.
                CuratorFramework[] clients = new CuratorFramework[n];
                java.util.concurrent.ExecutorService starter = java.util.concurrent.Executors.newFixedThreadPool(Math.min(n, 16));
                java.util.List<java.util.concurrent.Future<CuratorFramework>> started = new java.util.ArrayList<>();
                for (int i = 0; i < n; i++) {
                    started.add(starter.submit(() -> connect(connect, sessionMs)));
                }
                for (int i = 0; i < n; i++) {
                    clients[i] = started.get(i).get();
                }
                starter.shutdown();
                java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean(false);
                java.util.concurrent.CountDownLatch go = new java.util.concurrent.CountDownLatch(1);
                java.util.concurrent.CountDownLatch stopped = new java.util.concurrent.CountDownLatch(1);
                java.util.List<StringBuilder> logs = new java.util.ArrayList<>();
                Thread[] threads = new Thread[n];
                for (int i = 0; i < n; i++) {
                    StringBuilder log = new StringBuilder();
                    logs.add(log);
                    Contender contender = contender(clients[i], path, recipe, i, csNanos, log);
                    threads[i] = new Thread(() -> {
                        try {
                            go.await();
                            contender.run(stop, stopped);
                        } catch (Exception e) {
                            e.printStackTrace();
                            System.exit(4);
                        }
                    });
                    threads[i].start();
                }
                System.out.println("READY");
                System.out.flush();
                waitForStdin("go");
                go.countDown();
                waitForStdin("stop");
                stop.set(true);
                stopped.countDown();
                for (Thread t : threads) { t.join(); }
                StringBuilder all = new StringBuilder();
                for (StringBuilder log : logs) {
                    synchronized (log) { all.append(log); }
                }
                Files.write(out, all.toString().getBytes(StandardCharsets.UTF_8));
                System.out.println("DONE");
                System.out.flush();
                waitForStdin("exit");
                // Closed in parallel too (128 closes one after another take over 10 s).
                java.util.concurrent.ExecutorService closer = java.util.concurrent.Executors.newFixedThreadPool(Math.min(n, 16));
                for (CuratorFramework c : clients) { closer.submit(c::close); }
                closer.shutdown();
                closer.awaitTermination(60, java.util.concurrent.TimeUnit.SECONDS);
                break;
            }
            case "many": {
                CuratorFramework client = connect(args[1], Integer.parseInt(args[6]));
                String prefix = args[2];
                int locks = Integer.parseInt(args[3]), nthreads = Integer.parseInt(args[4]);
                double seconds = Double.parseDouble(args[5]);
                java.util.concurrent.atomic.AtomicLong count = new java.util.concurrent.atomic.AtomicLong();
                System.out.println("READY");
                System.out.flush();
                waitForStdin("go");
                long end = System.nanoTime() + (long) (seconds * 1e9);
                Thread[] threads = new Thread[nthreads];
                for (int t = 0; t < nthreads; t++) {
                    final int start = t;
                    threads[t] = new Thread(() -> {
                        try {
                            int i = start;
                            while (System.nanoTime() < end) {
                                InterProcessMutex mutex = new InterProcessMutex(client, prefix + "/l" + (i % locks));
                                mutex.acquire();
                                mutex.release();
                                count.incrementAndGet();
                                i += nthreads;
                            }
                        } catch (Exception e) {
                            e.printStackTrace();
                            System.exit(4);
                        }
                    });
                    threads[t].start();
                }
                for (Thread t : threads) { t.join(); }
                System.out.println("COUNT " + count.get());
                System.out.flush();
                waitForStdin("exit");
                client.close();
                break;
            }
            case "queue": {
                CuratorFramework client = connect(args[1], Integer.parseInt(args[4]));
                String path = args[2];
                int n = Integer.parseInt(args[3]);
                int total = args.length > 5 ? Integer.parseInt(args[5]) : n + 1;
                boolean holds = args.length <= 6 || args[6].equals("1");
                InterProcessMutex holder = new InterProcessMutex(client, path);
                if (holds) { holder.acquire(); }
                System.out.println("BASE");
                System.out.flush();
                waitForStdin("spawn");
                java.util.concurrent.CountDownLatch drained = new java.util.concurrent.CountDownLatch(n);
                long[][] held = new long[n][2];
                for (int i = 0; i < n; i++) {
                    InterProcessMutex m = new InterProcessMutex(client, path);
                    final int k = i;
                    Thread t = new Thread(() -> {
                        try {
                            m.acquire();
                            held[k][0] = System.nanoTime();
                            held[k][1] = System.nanoTime();
                            m.release();
                            drained.countDown();
                        } catch (Exception e) {
                            e.printStackTrace();
                            System.exit(4);
                        }
                    });
                    t.setDaemon(true);
                    t.start();
                }
                while (client.getChildren().forPath(path).size() < total) { Thread.sleep(20); }
                System.out.println("QUEUED");
                System.out.flush();
                waitForStdin("go");
                long t0 = System.nanoTime();
                if (holds) { holder.release(); }
                drained.await();
                long t1 = System.nanoTime();
                StringBuilder out = new StringBuilder();
                for (long[] h : held) { out.append("HOLD ").append(h[0]).append(' ').append(h[1]).append('\n'); }
                System.out.print(out);
                System.out.println("DRAINED_NS " + (t1 - t0));
                System.out.flush();
                waitForStdin("exit");
                client.close();
                break;
            }
            default:
                System.err.println("unknown mode " + mode);
                System.exit(2);
        }
        System.exit(0);
    }
}
