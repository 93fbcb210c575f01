// A Curator 5.x peer for zk-recipes' interop tests and benchmarks.
//
//   java CuratorPeer lock  CONNECT PATH ROUNDS COUNTER EVENTS OCCUPANCY ID SESSION_MS
//   java CuratorPeer hold  CONNECT PATH ID SESSION_MS      (prints HOLDING <seq>; releases on stdin EOF or "release")
//   java CuratorPeer latch CONNECT PATH ID SESSION_MS      (prints LEADER / NOT_LEADER; quits on stdin EOF or "quit")
//   java CuratorPeer bench CONNECT PATH SECONDS ID SESSION_MS   (loops acquire/release; prints COUNT <n>)
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
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
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
            case "bench": {
                CuratorFramework client = connect(args[1], Integer.parseInt(args[5]));
                InterProcessMutex mutex = new InterProcessMutex(client, args[2]);
                System.out.println("READY");
                System.out.flush();
                waitForStdin("go");
                long end = System.nanoTime() + (long) (Double.parseDouble(args[3]) * 1e9);
                long count = 0;
                while (System.nanoTime() < end) {
                    mutex.acquire();
                    count++;
                    mutex.release();
                }
                System.out.println("COUNT " + count);
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
