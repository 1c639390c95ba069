#include "real/buffer_pool.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace rv {

struct BufferPool::State {
  size_t max_cached = 0;
  bool open = true;  // false once the pool object is gone: released blocks are freed
  mutable std::mutex mu;
  std::map<size_t, std::vector<void*>> kept;  // by block size, bytes
  size_t cached = 0;
  int64_t reused = 0;

  // Keeps `block` of `bytes` if there is room, else frees it.
  void give_back(void* block, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (open && cached + bytes <= max_cached) {
        kept[bytes].push_back(block);
        cached += bytes;
        return;
      }
    }
    std::free(block);
  }
};

BufferPool::BufferPool(size_t max_cached) : state_(std::make_shared<State>()) {
  state_->max_cached = max_cached;
}

BufferPool::~BufferPool() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->open = false;
  for (auto& [bytes, blocks] : state_->kept)
    for (void* b : blocks) std::free(b);
  state_->kept.clear();
  state_->cached = 0;
}

at::Tensor BufferPool::take(int64_t elems, at::ScalarType type) {
  const size_t need = static_cast<size_t>(elems) * c10::elementSize(type);
  if (need < kMinBytes) return at::empty({elems}, type);
  const size_t bytes = (need + kGranule - 1) / kGranule * kGranule;
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->kept.find(bytes);
    if (it != state_->kept.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
      state_->cached -= bytes;
      ++state_->reused;
    }
  }
  if (block == nullptr) {
    block = std::aligned_alloc(64, bytes);  // bytes is a multiple of 64
    if (block == nullptr) throw std::bad_alloc();
  }
  std::shared_ptr<State> state = state_;
  return at::from_blob(
      block, {elems}, [state, bytes](void* p) { state->give_back(p, bytes); },
      at::TensorOptions().dtype(type));
}

size_t BufferPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->cached;
}

int64_t BufferPool::reused() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reused;
}

}  // namespace rv
