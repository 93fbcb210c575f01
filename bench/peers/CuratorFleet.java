// The Curator side of zk-bench's fleet scenario: COUNT sessions in one JVM, each a
// CuratorFramework, following the phases zk-bench announces on stdin.
//
//   java CuratorFleet CONNECT PREFIX FIRST COUNT SESSION_MS
//       connects sessions FIRST..FIRST+COUNT, prints READY; then, on stdin:
//       hold   session g takes InterProcessMutex PREFIX/l<g>; prints HELD once every one holds
//       half   every odd g releases its lock and queues for PREFIX/l<g-1>; prints WAITING
//       count  prints HOLDING <sessions holding a lock now>
//       exit   closes its sessions and exits
// (the protocol of bench/src/peers/fleet.rs, which its Rust and kazoo drivers speak too).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public class CuratorFleet {
    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String prefix = args[1];
        int first = Integer.parseInt(args[2]);
        int count = Integer.parseInt(args[3]);
        int sessionMs = Integer.parseInt(args[4]);
        CuratorFramework[] clients = new CuratorFramework[count];
        for (int i = 0; i < count; i++) {
            clients[i] = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.min(sessionMs, 15000))
                .retryPolicy(new RetryNTimes(100, 100))
                .build();
            clients[i].start();
        }
        for (CuratorFramework c : clients) {
            c.blockUntilConnected();
        }
        // InterProcessMutex belongs to the thread that acquired it: each session's phases run
        // on a thread of its own.
        CountDownLatch holdGo = new CountDownLatch(1);
        CountDownLatch halfGo = new CountDownLatch(1);
        CountDownLatch held = new CountDownLatch(count);
        int odd = 0;
        for (int i = 0; i < count; i++) {
            odd += (first + i) % 2;
        }
        CountDownLatch released = new CountDownLatch(odd);
        AtomicInteger holding = new AtomicInteger();
        for (int i = 0; i < count; i++) {
            CuratorFramework client = clients[i];
            int g = first + i;
            Thread t = new Thread(() -> {
                try {
                    holdGo.await();
                    InterProcessMutex own = new InterProcessMutex(client, prefix + "/l" + g);
                    own.acquire();
                    holding.incrementAndGet();
                    held.countDown();
                    halfGo.await();
                    if (g % 2 == 1) {
                        own.release();
                        holding.decrementAndGet();
                        released.countDown();
                        new InterProcessMutex(client, prefix + "/l" + (g - 1)).acquire();
                        // Admitted beside its holder only if the lock is broken: the count says so.
                        holding.incrementAndGet();
                    }
                    new CountDownLatch(1).await();
                } catch (Exception e) {
                    // The end of the run (the sessions closing) or a failure the count shows.
                }
            });
            t.setDaemon(true);
            t.start();
        }
        say("READY");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String word = line.trim();
            if (word.equals("hold")) {
                holdGo.countDown();
                held.await();
                say("HELD");
            } else if (word.equals("half")) {
                halfGo.countDown();
                released.await();
                say("WAITING");
            } else if (word.equals("count")) {
                say("HOLDING " + holding.get());
            } else if (word.equals("exit")) {
                break;
            }
        }
        for (CuratorFramework c : clients) {
            c.close();
        }
        System.exit(0);
    }
}
