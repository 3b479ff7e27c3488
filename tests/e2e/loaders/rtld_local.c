/* rtld_local: a host that loads a verbs plugin (rtld_local_plugin.c) with
 * dlopen(RTLD_LOCAL), as Python loads pyverbs, and runs it.  The host
 * itself is not linked against libibverbs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  /* A verb called before any libibverbs is loaded (the shim's, reached
   * through the global scope; absent without rdmasan): nothing to reach
   * yet.  The plugin's calls below must still find the real library once
   * it is loaded: the shim does not keep the first failed lookup. */
  enum { kDisabled = 0 };
  int (*is_fork_initialized)(void);
  *(void **)&is_fork_initialized = dlsym(RTLD_DEFAULT, "ibv_is_fork_initialized");
  if (is_fork_initialized && is_fork_initialized() != kDisabled) {
    fprintf(stderr, "FATAL: fork support known before libibverbs was loaded\n");
    return 3;
  }
  void *plugin = dlopen(PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!plugin) {
    fprintf(stderr, "FATAL: dlopen %s: %s\n", PLUGIN_PATH, dlerror());
    return 3;
  }
  /* libibverbs came with the plugin, into its local scope only (else this
   * tests nothing): a symbol only libibverbs defines is not global. */
  if (dlsym(RTLD_DEFAULT, "ibv_cmd_create_qp")) {
    fprintf(stderr, "FATAL: libibverbs is in the global scope\n");
    return 3;
  }
  int (*run)(void);
  *(void **)&run = dlsym(plugin, "plugin_run");
  if (!run || run()) return 3;
  printf("DONE\n");
  return 0;
}
