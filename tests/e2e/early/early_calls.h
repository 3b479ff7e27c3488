/* early_calls.h: see early_calls.c. */
#ifndef RDMASAN_TESTS_E2E_EARLY_CALLS_H_
#define RDMASAN_TESTS_E2E_EARLY_CALLS_H_

int early_failed(void);
void early_use(void);

#endif
