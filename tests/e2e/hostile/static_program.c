/* A statically linked program: LD_PRELOAD cannot reach it, so
 * `rdmasan run` must refuse it with a clear error (issue 29 item 12). */
int main(void) { return 0; }
