/* early_main.c: a program linked against libearly_calls (whose constructor
 * runs before librdmasan's, as a dependency's does), with a constructor of
 * its own at priority 101 that makes verbs calls too; main then uses what
 * the library's constructor made.  Exit status 0 only if every step
 * worked. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <unistd.h>

#include "early_calls.h"

static int g_prio_ok;

__attribute__((constructor(101))) static void prio_ctor(void) {
  int n = -1;
  struct ibv_device** list = ibv_get_device_list(&n);
  g_prio_ok = list != NULL;
  if (list) ibv_free_device_list(list);
  fprintf(stderr, "early: prio101: ibv_get_device_list %s (%d devices)\n", g_prio_ok ? "ok" : "FAILED", n);
}

int main(void) {
  early_use();
  int failed = early_failed() || !g_prio_ok;
  printf("early: %s\n", failed ? "FAILED" : "all steps ok");
  return failed;
}
