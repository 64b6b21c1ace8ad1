#include "core/cuda/caching_allocator.h"

#include <algorithm>
#include <tuple>

#include "core/allocator.h"
#include "core/error.h"

namespace trident::cuda {

// A piece of a segment. The blocks of one segment form a list in address order (prev/next), so
// that a freed block finds its neighbours to merge with.
struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  size_t requested = 0;  // bytes asked for while allocated
  StreamId stream = 0;
  bool small = false;    // which pool it belongs to
  bool allocated = false;
  bool pending = false;  // freed, waiting for events on other streams
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<StreamId> other_streams;  // record_stream() while allocated
};

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<RawDeviceAllocator> raw, Device device, CachingAllocatorOptions options)
    : raw_(std::move(raw)), device_(device), opt_(options) {
  TRIDENT_CHECK(opt_.round > 0 && (opt_.round & (opt_.round - 1)) == 0, "CachingAllocator: round ", opt_.round,
                " must be a power of two");
  TRIDENT_CHECK(opt_.small_segment >= opt_.small_size && opt_.large_segment >= opt_.medium_limit,
                "CachingAllocator: segments must hold the largest request of their pool");
}

CachingAllocator::~CachingAllocator() {
  // Blocks still handed out are leaked on purpose: memory in use must not go back to the device.
  try {
    empty_cache();
  } catch (...) {
  }
}

size_t CachingAllocator::round_size(size_t nbytes) const {
  const size_t n = std::max<size_t>(nbytes, 1);
  return (n + opt_.round - 1) / opt_.round * opt_.round;
}

size_t CachingAllocator::segment_size(size_t rounded) const {
  if (rounded <= opt_.small_size) return opt_.small_segment;
  if (rounded < opt_.medium_limit) return opt_.large_segment;
  return (rounded + opt_.large_round - 1) / opt_.large_round * opt_.large_round;
}

CachingAllocator::Block* CachingAllocator::find_free(Pool& pool, size_t size, StreamId stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

void CachingAllocator::note_reserved(int64_t delta) {
  stats_.reserved_bytes += delta;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  trident::detail::record_reserved(device_, delta);
}

void* CachingAllocator::raw_malloc_or_retry(size_t seg_size, size_t nbytes) {
  void* p = raw_->malloc(seg_size);
  if (!p) {
    // Out of memory: give back what is cached and try once more.
    ++stats_.oom_retries;
    process_events(/*wait_all=*/true);
    release_cached();
    p = raw_->malloc(seg_size);
  }
  TRIDENT_CHECK(p != nullptr, "out of memory on ", device_, " allocating ", nbytes, " bytes (a segment of ", seg_size,
                " bytes): the caching allocator holds ", stats_.reserved_bytes, " bytes, of which ",
                stats_.allocated_bytes, " are in use by tensors (", stats_.active_blocks, " blocks)");
  ++stats_.device_mallocs;
  ++stats_.segments;
  note_reserved(static_cast<int64_t>(seg_size));
  return p;
}

void* CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  process_events(/*wait_all=*/false);
  const size_t size = round_size(nbytes);
  Pool& pool = pool_for(size);
  Block* b = find_free(pool, size, stream);
  if (b) {
    ++stats_.cache_hits;
    --stats_.cached_blocks;
  } else {
    const size_t seg = segment_size(size);
    char* p = static_cast<char*>(raw_malloc_or_retry(seg, nbytes));  // throws when out of memory
    b = new Block;
    b->ptr = p;
    b->size = seg;
    b->stream = stream;
    b->small = &pool == &small_;
  }
  // Split off the remainder when it is worth keeping (NOTE [Caching device allocator]).
  const size_t rest = b->size - size;
  if ((b->small && rest >= opt_.round) || (!b->small && rest > opt_.min_split_large)) {
    Block* r = new Block;
    r->ptr = b->ptr + size;
    r->size = rest;
    r->stream = b->stream;
    r->small = b->small;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool.insert(r);
    ++stats_.cached_blocks;
  }
  b->allocated = true;
  b->requested = nbytes;
  active_.emplace(b->ptr, b);
  stats_.requested_bytes += static_cast<int64_t>(nbytes);
  stats_.allocated_bytes += static_cast<int64_t>(b->size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.active_blocks;
  trident::detail::record_alloc(device_, nbytes);
  return b->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  TRIDENT_ASSERT(it != active_.end(), "freeing a pointer the ", device_, " caching allocator did not hand out");
  Block* b = it->second;
  active_.erase(it);
  b->allocated = false;
  stats_.requested_bytes -= static_cast<int64_t>(b->requested);
  stats_.allocated_bytes -= static_cast<int64_t>(b->size);
  --stats_.active_blocks;
  trident::detail::record_free(device_, b->requested);
  if (!b->other_streams.empty()) {
    Pending p{b, {}};
    for (StreamId s : b->other_streams) p.events.push_back(raw_->record_event(s));
    b->other_streams.clear();
    b->pending = true;
    pending_.push_back(std::move(p));
    return;
  }
  free_block(b);
}

void CachingAllocator::free_block(Block* b) {
  Pool& pool = b->small ? small_ : large_;
  b->pending = false;
  b->requested = 0;
  // Merge with free neighbours of the same segment (a segment's blocks share its stream).
  for (Block* n : {b->prev, b->next}) {
    if (!n || n->allocated || n->pending) continue;
    pool.erase(n);
    --stats_.cached_blocks;
    if (n == b->prev) {
      b->ptr = n->ptr;
      b->prev = n->prev;
      if (b->prev) b->prev->next = b;
    } else {
      b->next = n->next;
      if (b->next) b->next->prev = b;
    }
    b->size += n->size;
    delete n;
  }
  pool.insert(b);
  ++stats_.cached_blocks;
}

void CachingAllocator::process_events(bool wait_all) {
  if (pending_.empty()) return;
  if (wait_all) raw_->synchronize();
  std::vector<Pending> still;
  for (Pending& p : pending_) {
    bool done = true;
    for (void* e : p.events) done = done && (wait_all || raw_->event_done(e));
    if (done) {
      for (void* e : p.events) raw_->destroy_event(e);
      free_block(p.block);
    } else {
      still.push_back(std::move(p));
    }
  }
  pending_ = std::move(still);
}

void CachingAllocator::release_cached() {
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment still (partly) in use
        ++it;
        continue;
      }
      raw_->free(b->ptr);
      ++stats_.device_frees;
      --stats_.segments;
      --stats_.cached_blocks;
      note_reserved(-static_cast<int64_t>(b->size));
      it = pool->erase(it);
      delete b;
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  process_events(/*wait_all=*/true);
  release_cached();
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  TRIDENT_CHECK(it != active_.end(), "record_stream: ", ptr, " is not an allocation of the ", device_, " caching allocator");
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->other_streams.begin(), b->other_streams.end(), stream) == b->other_streams.end())
    b->other_streams.push_back(stream);
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

size_t CachingAllocator::block_size(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  return it == active_.end() ? 0 : it->second->size;
}

}  // namespace trident::cuda
