// interpose/domains: the shim's view of device memory, parent domains and
// imported objects.
//
// ibv_reg_dm_mr and ibv_alloc_parent_domain are inline in verbs.h and
// dispatch through the context's verbs_context ops: wrapped like the data
// path, for real providers and softnic alike (their wrappers, wrap::RegDmMr
// and wrap::AllocParentDomain, are in the list of interpose/wrap_ops.inc).  A DM MR is a kRegMr event
// with addr 0 and iova 0 (zero-based: the program addresses it from 0; its
// memory is the device's, none of the program's), access as asked
// (IBV_ACCESS_ZERO_BASED in it).  A parent domain, and an imported PD or
// MR, is an alias: another handle of an object the books know (the parent
// domain's PD, the imported object), so what is made with it belongs to
// that object; dealloc or unimport of an alias forgets the handle only.
//
// May not: change what a wrapped op returns, or emit an event for an alias
// itself (the books have one object, not two).
#ifndef RDMASAN_INTERPOSE_DOMAINS_H_
#define RDMASAN_INTERPOSE_DOMAINS_H_

#include <infiniband/verbs.h>

namespace rdmasan::interpose {

// `obj` is a handle of the object `of` is (its id); Forget drops that.
void NoteAlias(const void* obj, const void* of);
// Parent domains the wrapped op made (aliases of their PDs), until
// ForgetParentDomain (which forgets the handle too).
bool IsParentDomain(const void* pd);
void ForgetParentDomain(const void* pd);

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_DOMAINS_H_
