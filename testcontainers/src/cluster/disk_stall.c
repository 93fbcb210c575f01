/* zk-testcluster's disk-stall shim, loaded into a ZooKeeper server's JVM with LD_PRELOAD when the
 * cluster is started with ClusterConfig::disk_stall (see cluster/grey.rs).
 *
 * Every fsync(2) and fdatasync(2) of the process first reads the file named by
 * $ZK_GREY_STALL_FILE: a decimal number of milliseconds. When it is above zero, the call sleeps
 * that long before doing the real sync, so the server's writes (which wait for the transaction
 * log's fdatasync) hang while everything else it does (pings, reads, elections) goes on. The
 * harness writes the file (ZkCluster::stall_disk / unstall_disk); no file, or 0, is no delay. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long stall_ms(void) {
    const char *path = getenv("ZK_GREY_STALL_FILE");
    if (path == NULL) {
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    return strtol(buf, NULL, 10);
}

static void stall(void) {
    int saved = errno;
    long ms = stall_ms();
    if (ms > 0) {
        struct timespec left = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&left, &left) == -1 && errno == EINTR) {
        }
    }
    errno = saved;
}

int fsync(int fd) {
    static int (*real)(int);
    if (real == NULL) {
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    }
    stall();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (real == NULL) {
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    }
    stall();
    return real(fd);
}
