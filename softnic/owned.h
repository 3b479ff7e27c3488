// softnic/owned: ownership of a softnic object while a create verb builds
// it.  Owned<T> frees the object on every error path of the verb, keeping
// the errno the verb fails with; release() hands it over once it is the
// program's handle (or the process's, for the fabric).
//
// May not: throw (objects are made with new (std::nothrow)), or free what
// release() handed over.
#ifndef RDMASAN_SOFTNIC_OWNED_H_
#define RDMASAN_SOFTNIC_OWNED_H_

#include <errno.h>

#include <memory>
#include <new>

namespace rdmasan::softnic {

template <typename T>
struct DeleteKeepingErrno {
  void operator()(T* object) const {
    const int e = errno;
    delete object;
    errno = e;
  }
};

template <typename T>
using Owned = std::unique_ptr<T, DeleteKeepingErrno<T>>;

// A new T, or null (ENOMEM is the caller's to set).
template <typename T>
Owned<T> NewOwned() {
  return Owned<T>(new (std::nothrow) T());
}

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_OWNED_H_
