/* Traces survive what ends programs (issue 10 item 11).  The parent makes
 * no verbs call (no trace of its own); it spawns itself as children that
 * record the run's trace (the same trace=PATH) and end by a signal:
 *   - SIGUSR1 and SIGHUP raised after some posts and polls, SIGALRM while
 *     blocked in ibv_get_cq_event: each must leave a complete trace at PATH
 *     (closed by the shim's handler), not PATH.incomplete;
 *   - SIGKILL while blocked in ibv_get_cq_event: PATH.incomplete must hold
 *     the events made before (flushed before the call blocks).
 * The last child (SIGUSR1) leaves the trace run_check.sh replays. */
#include "common.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>

extern char **environ;

/* Posts and polls 64 RDMA WRITEs, then ends by `how`. */
static int child(const char *how) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.channel = 1});
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  for (int i = 0; i < 64; ++i) {
    struct ibv_send_wr wr = rig_write_wr((uint64_t)i, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
    rig_poll_ok(r.cq[0], 1);
  }
  if (strcmp(how, "usr1") == 0) raise(SIGUSR1);
  if (strcmp(how, "hup") == 0) raise(SIGHUP);
  if (strcmp(how, "alrm") == 0) alarm(1);
  /* "alrm" and "kill": block until the signal comes (no completion will). */
  if (ibv_req_notify_cq(r.cq[1], 0)) DIE("req_notify failed");
  struct ibv_cq *cq;
  void *ctx;
  ibv_get_cq_event(r.ch, &cq, &ctx);
  DIE("the child outlived its signal");
}

static const char *trace_path(void) {
  static char path[4096];
  const char *opts = getenv("RDMASAN_OPTIONS");
  const char *t = opts ? strstr(opts, "trace=") : NULL;
  if (!t) DIE("no trace= in RDMASAN_OPTIONS (run under run_check.sh)");
  t += strlen("trace=");
  size_t n = strcspn(t, ": \n");
  if (n >= sizeof path) DIE("trace path too long");
  memcpy(path, t, n);
  path[n] = 0;
  return path;
}

static off_t size_of(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Spawns a child that ends by `how`; returns the signal that ended it. */
static int run_child(char *self, const char *how, int kill_after_ms) {
  pid_t pid;
  char *argv[] = {self, (char *)how, NULL};
  if (posix_spawn(&pid, self, NULL, NULL, argv, environ)) DIE("posix_spawn failed");
  if (kill_after_ms) {
    usleep(kill_after_ms * 1000);
    kill(pid, SIGKILL);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) DIE("waitpid failed");
  if (!WIFSIGNALED(status)) DIE("child '%s' was not ended by a signal (status 0x%x)", how, status);
  return WTERMSIG(status);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1) return child(argv[1]);
  const char *path = trace_path();
  char incomplete[4200];
  snprintf(incomplete, sizeof incomplete, "%s.incomplete", path);

  /* Ended by signals that the shim handles: complete traces.  The first
   * (SIGHUP) is also the measure of what the children record. */
  const struct {
    const char *how;
    int sig;
  } ends[] = {{"hup", SIGHUP}, {"alrm", SIGALRM}, {"usr1", SIGUSR1}};
  off_t reference = -1;
  for (size_t i = 0; i < sizeof ends / sizeof ends[0]; ++i) {
    unlink(path);
    unlink(incomplete);
    if (i == 2) {
      /* Killed while blocked, between the others: no handler runs, but what
       * the child recorded before it blocked must be in the file (the
       * events alone are about 2 KB of the reference's size). */
      if (run_child(argv[0], "kill", 1500) != SIGKILL) DIE("the kill child was not killed");
      off_t killed = size_of(incomplete);
      printf("SIGKILL while blocked: %lld bytes (a complete trace: %lld)\n", (long long)killed,
             (long long)reference);
      if (size_of(path) >= 0) DIE("a killed child left a complete-looking trace");
      if (killed < reference - 1024) DIE("the killed child's events were not flushed before it blocked");
      unlink(incomplete);
    }
    int sig = run_child(argv[0], ends[i].how, 0);
    if (sig != ends[i].sig) DIE("child '%s' ended by signal %d, wanted %d", ends[i].how, sig, ends[i].sig);
    printf("%s: trace %lld bytes, incomplete %lld\n", ends[i].how, (long long)size_of(path),
           (long long)size_of(incomplete));
    if (size_of(path) < 2048) DIE("child '%s' left no complete trace", ends[i].how);
    if (size_of(incomplete) >= 0) DIE("child '%s' left %s behind", ends[i].how, incomplete);
    if (reference < 0) reference = size_of(path);
  }
  printf("DONE\n");
  return 0;
}
