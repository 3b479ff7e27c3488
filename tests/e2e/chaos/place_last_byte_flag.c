/* chaos place, planted: the reader takes the LAST byte of an RDMA WRITE's
 * target as its "the data is here" flag, then uses the whole buffer.  The
 * bytes of one message land in no defined order: only the completion, or
 * the receive completion of an immediate, says they are all there
 * (ibv_query_qp_data_in_order(3)).  softnic without chaos places a message
 * at once, ascending, so plain `rdmasan run` is silent
 * (place_last_byte_flag_control_plain.c); under --chaos=place it places
 * the message in chunks over several steps, the last chunk early, and the
 * reader finds the rest missing: abort(), a `crash` report at that line.
 * The writer is the parent, the reader a child forked before any verbs
 * call (place_pair.h). */
// RUN-OPTS: --chaos=place:p=1
// EXPECT: crash: SIGABRT \(pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+ T[0-9]+\); raised by the program
// SUMMARY: ^SUMMARY: rdmasan: crash [^ ]+ in [^ ]+$
// NO-DONE
// STATUS: 134
#include "place_pair.h"

static int reader(struct side *s) {
  static uint8_t buf[ROUNDS * MSG];
  side_open(s, buf, sizeof buf);
  side_connect(s);
  if (write(s->to, "r", 1) != 1) DIE("write: %s", strerror(errno));
  for (int k = 0; k < ROUNDS; ++k) {
    const volatile uint8_t *b = buf + (size_t)k * MSG;
    double end = rig_now() + 20.0;
    while (b[MSG - 1] != pattern(k, MSG - 1)) /* the flag: the last byte has arrived */
      if (rig_now() > end) DIE("round %d never arrived", k);
    int whole = round_complete(b, k); /* so the data is all here, it assumes */
    char c;
    if (read(s->from, &c, 1) != 1) DIE("the writer is gone");
    if (!whole) abort();  // CHECK: crash
    if (write(s->to, "k", 1) != 1) DIE("write: %s", strerror(errno));
  }
  side_close(s);
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int up[2], down[2];
  if (pipe(up) || pipe(down)) DIE("pipe: %s", strerror(errno));
  pid_t child = fork();
  if (child < 0) DIE("fork: %s", strerror(errno));
  if (child == 0) {
    close(up[0]);
    close(down[1]);
    struct side s = {.to = up[1], .from = down[0]};
    _exit(reader(&s));
  }
  close(up[1]);
  close(down[0]);
  struct side s = {.to = down[1], .from = up[0]};
  return run_writer(&s, child, 0);
}
