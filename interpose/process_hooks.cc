// The ends of a process image, in the preloaded library only:
//  - _exit and _Exit do what exit() does under the shim (hooks.cc
//    ExitStatusAtUnderscoreExit): the trace closed complete, the findings'
//    summary and SARIF log written, the `exitcode` status when the run had
//    errors; once, only in the process whose books these are (a vfork
//    child shares them and exits untouched), and only in an image that
//    made verbs calls itself (a forked child that made none has nothing
//    to end, and may hold locks its parent's threads held at the fork);
//  - the exec family closes the image's trace first (nothing of it runs
//    after a successful exec); the new image writes its own,
//    PATH.<pid>[.<n>] (traces/tree.cc).  glibc's exec functions call
//    execve inside libc, so each is hooked, not only execve.
// May not: allocate before the real exec (a vfork child may call it), or
// change what any of these return.
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose/hooks.h"
#include "interpose/loader.h"

namespace ip = rdmasan::interpose;

#define RDMASAN_HOOK extern "C" __attribute__((visibility("default")))

namespace {

using ExitFn = void (*)(int);

[[noreturn]] void ExitNow(ExitFn real, int status) {
  if (real) real(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

// The argument count of execl, execlp, execle, `first` (argv[0]) included,
// the terminating null pointer not.
size_t CountArgs(const char* first, va_list ap) {
  size_t n = 1;
  if (first)
    while (va_arg(ap, char*)) ++n;
  return n;
}

// Those arguments into argv[0..n-1]; the pointer after the terminating
// null (execle's envp) into *after.
void CollectArgs(const char* first, va_list ap, char** argv, size_t n, char* const** after) {
  argv[0] = const_cast<char*>(first);
  for (size_t i = 1; i < n; ++i) argv[i] = va_arg(ap, char*);
  if (first) (void)va_arg(ap, char*);  // the null
  if (after) *after = va_arg(ap, char* const*);
}

}  // namespace

RDMASAN_HOOK void _exit(int status) {
  static constinit ip::NextSym<ExitFn> real("_exit");
  ExitNow(real.Get(), ip::ExitStatusAtUnderscoreExit(status));
}

RDMASAN_HOOK void _Exit(int status) {
  static constinit ip::NextSym<ExitFn> real("_Exit");
  ExitNow(real.Get(), ip::ExitStatusAtUnderscoreExit(status));
}

RDMASAN_HOOK int execve(const char* path, char* const argv[], char* const envp[]) {
  static constinit ip::NextSym<int (*)(const char*, char* const[], char* const[])> real("execve");
  ip::BeforeExec();
  return real(path, argv, envp);
}

RDMASAN_HOOK int execv(const char* path, char* const argv[]) {
  static constinit ip::NextSym<int (*)(const char*, char* const[])> real("execv");
  ip::BeforeExec();
  return real(path, argv);
}

RDMASAN_HOOK int execvp(const char* file, char* const argv[]) {
  static constinit ip::NextSym<int (*)(const char*, char* const[])> real("execvp");
  ip::BeforeExec();
  return real(file, argv);
}

RDMASAN_HOOK int execvpe(const char* file, char* const argv[], char* const envp[]) {
  static constinit ip::NextSym<int (*)(const char*, char* const[], char* const[])> real("execvpe");
  ip::BeforeExec();
  return real(file, argv, envp);
}

RDMASAN_HOOK int fexecve(int fd, char* const argv[], char* const envp[]) {
  static constinit ip::NextSym<int (*)(int, char* const[], char* const[])> real("fexecve");
  ip::BeforeExec();
  return real(fd, argv, envp);
}

RDMASAN_HOOK int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) {
  static constinit ip::NextSym<int (*)(int, const char*, char* const[], char* const[], int)> real("execveat");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  ip::BeforeExec();
  return real(dirfd, path, argv, envp, flags);
}

// The list forms, as glibc builds them: the arguments into an array on the
// stack, then the vector form (hooked above; BeforeExec runs there).
#define RDMASAN_EXECL_HOOK(name, vector_call, with_env)                           \
  RDMASAN_HOOK int name(const char* path, const char* arg, ...) {                 \
    va_list ap;                                                                   \
    va_start(ap, arg);                                                            \
    const size_t n = CountArgs(arg, ap);                                          \
    va_end(ap);                                                                   \
    char** argv = static_cast<char**>(__builtin_alloca((n + 1) * sizeof(char*))); \
    char* const* envp = environ;                                                  \
    va_start(ap, arg);                                                            \
    CollectArgs(arg, ap, argv, n, with_env ? &envp : nullptr);                    \
    va_end(ap);                                                                   \
    argv[n] = nullptr;                                                            \
    (void)envp;                                                                   \
    return vector_call;                                                           \
  }
RDMASAN_EXECL_HOOK(execl, execv(path, argv), false)
RDMASAN_EXECL_HOOK(execlp, execvp(path, argv), false)
RDMASAN_EXECL_HOOK(execle, execve(path, argv, envp), true)
