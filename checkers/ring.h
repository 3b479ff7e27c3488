// checkers/ring: the outstanding WRs of one queue, oldest first.
//
// A growable circular buffer: posting appends, retirement drops from the
// front, and the slots are reused, so a queue in steady state neither
// allocates nor moves its WRs (a std::deque allocates a block every few
// hundred pushes and frees one as often).  Capacity doubles when a post
// finds the ring full (a program may post past the queue's limit: that is
// the sq-overflow it is told about, and the books keep every WR).
//
// May not: shrink, or keep references valid across a push (it may grow).
#ifndef RDMASAN_CHECKERS_RING_H_
#define RDMASAN_CHECKERS_RING_H_

#include <cstddef>
#include <utility>
#include <vector>

namespace rdmasan::checkers {

template <typename T>
class Ring {
 public:
  Ring() = default;
  Ring(const Ring& o)
      : slots_(o.slots_), data_(slots_.data()), mask_(o.mask_), head_(o.head_), size_(o.size_) {}
  Ring(Ring&& o) noexcept
      : slots_(std::move(o.slots_)), data_(slots_.data()), mask_(o.mask_), head_(o.head_), size_(o.size_) {
    o.Reset();
  }
  Ring& operator=(Ring o) noexcept {
    slots_.swap(o.slots_);
    data_ = slots_.data();
    mask_ = o.mask_;
    head_ = o.head_;
    size_ = o.size_;
    return *this;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[(head_ + i) & mask_]; }
  const T& operator[](size_t i) const { return data_[(head_ + i) & mask_]; }
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }

  // The slot for a new last element: cleared by the caller's assignment.
  T& push_back() {
    if (size_ == slots_.size()) Grow();
    return data_[(head_ + size_++) & mask_];
  }
  void push_back(T v) { push_back() = std::move(v); }
  void pop_front(size_t n = 1) {
    if (n > size_) n = size_;
    head_ = (head_ + n) & mask_;
    size_ -= n;
  }
  // Keeps the n oldest elements (their slots past n stay for reuse).
  void truncate(size_t n) {
    if (n < size_) size_ = n;
  }
  void clear() { head_ = size_ = 0; }

  class const_iterator {
   public:
    const_iterator(const Ring* r, size_t i) : r_(r), i_(i) {}
    const T& operator*() const { return (*r_)[i_]; }
    const T* operator->() const { return &(*r_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }

   private:
    const Ring* r_;
    size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  void Reset() {
    slots_.clear();
    data_ = nullptr;
    mask_ = head_ = size_ = 0;
  }
  void Grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_ = std::move(bigger);
    data_ = slots_.data();
    mask_ = slots_.size() - 1;
    head_ = 0;
  }
  std::vector<T> slots_;  // a power of two in size
  T* data_ = nullptr;     // slots_.data() and size - 1, kept at hand: no
  size_t mask_ = 0;       // division by sizeof(T) per access
  size_t head_ = 0, size_ = 0;
};

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_RING_H_
