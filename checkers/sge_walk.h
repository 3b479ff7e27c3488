// checkers/sge_walk: what the SGE checks (sge-count, invalid-lkey,
// sge-out-of-bounds, mr-access) share: the scatter lists of a post
// (CheckContext::Lists) and the MR an SGE names.
#ifndef RDMASAN_CHECKERS_SGE_WALK_H_
#define RDMASAN_CHECKERS_SGE_WALK_H_

#include "checkers/check.h"

namespace rdmasan::checkers {

// The MR an SGE names if it is live and of the right PD, else null.
inline const MrState* SgeMr(CheckContext& c, const core::Sge& g, core::ObjId pd) {
  const MrState* mr = c.MrByLkey(g.lkey);
  return mr && mr->pd == pd ? mr : nullptr;
}

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_SGE_WALK_H_
