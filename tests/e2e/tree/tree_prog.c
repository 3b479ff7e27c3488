/* tree_prog.c: a verbs program that forks, execs, daemonizes, ends with
 * _exit, or sweeps its descriptors, for the process-tree tests of traces,
 * exit status and rdmasan's own descriptors (tree_test.sh says what each
 * case expects).  Each mode prints "tree_prog: <mode> done" where it ends
 * normally.
 *
 * usage: tree_prog MODE [DIR]
 *   system      finding, system("true | true"), clean work, exit(0)
 *   exec        finding, then execs itself as "exec2" (clean work, exit 0)
 *   fork        clean work; a forked child makes a finding and exit(0)s
 *   daemon      a registered MR, daemon(1, 1); the daemon does clean work
 *               and writes DIR/daemon.pid when done
 *   _exit       finding, _exit(0);   _Exit: the same with _Exit(0)
 *   none|close|dup2|raw_close DIR
 *               clean work; then every descriptor open on a file in DIR
 *               is left alone / closed / dup2'ed over with the program's
 *               data file / closed by the raw syscall (the data file is
 *               opened after, except for dup2); the program writes
 *               DIR/data.txt around more work and a finding; exit(0) */
#include "common.h"

#include <limits.h>
#include <sys/syscall.h>

/* dereg-in-flight, as tests/e2e/checks/dereg_in_flight.c makes it. */
static void finding(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0x2a, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  if (ibv_dereg_mr(smr)) DIE("dereg failed");
  struct ibv_wc wc;
  rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
}

/* A few posts and polls, all correct. */
static void clean_work(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  for (int i = 0; i < 8; ++i) {
    struct ibv_sge sge = rig_sge(smr, src, 8);
    struct ibv_send_wr wr = rig_write_wr(i, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
    struct ibv_wc wc;
    if (rig_poll_n(r.cq[0], &wc, 1) != 1 || wc.status != IBV_WC_SUCCESS) DIE("completion failed");
  }
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
}

/* Each descriptor open on a file in `dir`: closed, dup2'ed over with
 * `data`, or closed behind libc's back. */
static void sweep(const char *dir, const char *how, int data) {
  size_t n = strlen(dir);
  for (int fd = 3; fd < 65536; ++fd) {
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, target, sizeof target - 1);
    if (len < 0 || fd == data) continue;
    target[len] = '\0';
    if (strncmp(target, dir, n) != 0 || target[n] != '/') continue;
    if (strcmp(how, "close") == 0)
      close(fd);
    else if (strcmp(how, "dup2") == 0)
      dup2(data, fd);
    else if (strcmp(how, "raw_close") == 0)
      syscall(SYS_close, fd);
  }
}

static void write_line(int fd, const char *s) {
  if (write(fd, s, strlen(s)) != (ssize_t)strlen(s)) DIE("write: %s", strerror(errno));
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  const char *dir = argc > 2 ? argv[2] : ".";
  setvbuf(stdout, NULL, _IONBF, 0);
  if (strcmp(mode, "system") == 0) {
    finding();
    if (system("true | true") != 0) DIE("system failed");
    clean_work();
  } else if (strcmp(mode, "exec") == 0) {
    finding();
    execl("/proc/self/exe", argv[0], "exec2", (char *)NULL);
    DIE("exec: %s", strerror(errno));
  } else if (strcmp(mode, "exec2") == 0) {
    clean_work();
  } else if (strcmp(mode, "fork") == 0) {
    clean_work();
    pid_t pid = fork();
    if (pid < 0) DIE("fork: %s", strerror(errno));
    if (pid == 0) {
      finding();
      exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("tree_prog: child %d exited %d\n", (int)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  } else if (strcmp(mode, "daemon") == 0) {
    struct rig r;
    rig_setup(&r, NULL);
    static char buf[64];
    rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE); /* live across the fork */
    if (daemon(1, 1) != 0) DIE("daemon: %s", strerror(errno));
    clean_work();
    char path[PATH_MAX], tmp[PATH_MAX + 8], text[32];
    snprintf(path, sizeof path, "%s/daemon.pid", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) DIE("open %s: %s", tmp, strerror(errno));
    snprintf(text, sizeof text, "%d\n", (int)getpid());
    write_line(fd, text);
    close(fd);
    if (rename(tmp, path) != 0) DIE("rename: %s", strerror(errno));
  } else if (strcmp(mode, "_exit") == 0 || strcmp(mode, "_Exit") == 0) {
    finding();
    printf("tree_prog: %s done\n", mode);
    if (mode[1] == 'e') _exit(0);
    _Exit(0);
  } else if (strcmp(mode, "none") == 0 || strcmp(mode, "close") == 0 || strcmp(mode, "dup2") == 0 ||
             strcmp(mode, "raw_close") == 0) {
    clean_work();
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/data.txt", dir);
    /* dup2 needs the data file open first; after a close, its open takes
     * the lowest free number, which may have been rdmasan's. */
    const int early = strcmp(mode, "dup2") == 0;
    int data = early ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    sweep(dir, mode, data);
    if (!early) data = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (data < 0) DIE("open %s: %s", path, strerror(errno));
    write_line(data, "program data 1\n");
    clean_work();
    finding();
    write_line(data, "program data 2\n");
    close(data);
  } else {
    DIE("unknown mode '%s'", mode);
  }
  printf("tree_prog: %s done\n", mode);
  return 0;
}
