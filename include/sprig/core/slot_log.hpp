// sprig/core/slot_log.hpp — the record of how a structural change moved a PaddedCSR's slots.
//
// Per-slot state (gradients, momentum, Adam moments) is stored in arrays aligned with
// PaddedCSR::values(). Every structural operation of PaddedCSR can append to a SlotLog what
// it did to the slots, in order; replaying the log on a state array with apply() makes the
// state follow its weights: a moved weight keeps its state, a freed slot's state is zeroed,
// a newly born weight starts from zero, and the array is resized with the storage.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "config.hpp"

namespace sprig {

// Recording is not thread-safe; apply() is const and may replay one log on several arrays
// at once.
class SlotLog {
public:
  enum class Kind : std::uint8_t {
    Move,    // state[to] = state[from]      (from's state is not cleared by this event)
    Clear,   // state[slot] = 0              (slot freed, or a weight born there)
    Resize,  // state.resize(size), new tail zeroed
    Remap,   // state = gather(state, sources[offset .. offset + size)), -1 -> 0
  };
  struct Event {
    Kind kind;
    std::int64_t a;  // Move: from; Clear: slot; Resize: new size; Remap: new size
    std::int64_t b;  // Move: to; Remap: offset of its sources in remap_sources()
  };

  void move(std::int64_t from, std::int64_t to) { events_.push_back({Kind::Move, from, to}); }
  void clear(std::int64_t slot) { events_.push_back({Kind::Clear, slot, 0}); }
  void resize(std::int64_t size) { events_.push_back({Kind::Resize, size, 0}); }
  // A whole-array permutation: new slot s takes old slot sources[s] (or zero if -1).
  void remap(std::span<const std::int64_t> sources) {
    events_.push_back(
        {Kind::Remap, static_cast<std::int64_t>(sources.size()), static_cast<std::int64_t>(remap_sources_.size())});
    remap_sources_.insert(remap_sources_.end(), sources.begin(), sources.end());
  }
  // The same, taking the array: no copy where the log holds no other remap (a compaction's
  // sources are 8 bytes a slot, held once instead of twice).
  void remap(std::vector<std::int64_t>&& sources) {
    if (!remap_sources_.empty()) return remap(std::span<const std::int64_t>(sources));
    events_.push_back({Kind::Remap, static_cast<std::int64_t>(sources.size()), 0});
    remap_sources_ = std::move(sources);
  }

  // Streaming: with a sink set, flush_if_full() hands the events recorded so far to
  // sink(*this) once there are max_events of them and starts an empty log, so a large
  // structural change (a topology update logs ~3 events per dropped weight, 24 bytes each)
  // is replayed in bounded memory. The caller calls it between whole operations and flush()
  // at the end. The event buffer is reserved once for max_events plus a quarter for the
  // operation that crosses the mark (growing it by doubling held up to twice the chunk).
  void set_sink(std::size_t max_events, std::function<void(const SlotLog&)> sink) {
    max_events_ = max_events;
    sink_ = std::move(sink);
    events_.reserve(max_events + max_events / 4);
  }
  void flush_if_full() {
    if (sink_ && events_.size() >= max_events_) flush();
  }
  void flush() {
    if (sink_ && !events_.empty()) {
      sink_(*this);
      reset();
    }
  }

  bool empty() const noexcept { return events_.empty(); }
  std::size_t size() const noexcept { return events_.size(); }
  std::span<const Event> events() const noexcept { return events_; }
  std::span<const std::int64_t> remap_sources() const noexcept { return remap_sources_; }
  void reset() {
    events_.clear();
    remap_sources_.clear();
  }

  // Replays the log on a per-slot state array (any resizable contiguous container whose
  // elements value-initialise to zero, e.g. std::vector<float> or AlignedVector<double>).
  // Precondition: state was aligned with the matrix's slots before the logged changes (its
  // size then W.storage_size()); every per-slot array must replay the same log, or it falls
  // out of step. Ranges are checked only by SPRIG_ASSERT (debug builds). O(events + the
  // remapped sizes); may allocate (Resize, Remap) and then throws std::bad_alloc.
  // With width w > 1 every slot owns w consecutive elements (a BlockPaddedCSR's R x C
  // block, or per-slot state of one): slot s is state[s*w, (s+1)*w) and every event acts on
  // all w of them.
  template <class Vec>
  void apply(Vec& state, std::int64_t width = 1) const {
    using V = typename Vec::value_type;
    const auto w = static_cast<std::size_t>(width);
    SPRIG_ASSERT(width >= 1, "SlotLog width");
    Vec scratch;
    for (const Event& e : events_) {
      const auto a = static_cast<std::size_t>(e.a) * w, b = static_cast<std::size_t>(e.b) * w;
      switch (e.kind) {
        case Kind::Move:
          SPRIG_ASSERT(a + w <= state.size() && b + w <= state.size(), "SlotLog move range");
          for (std::size_t k = 0; k < w; ++k) state[b + k] = state[a + k];
          break;
        case Kind::Clear:
          SPRIG_ASSERT(a + w <= state.size(), "SlotLog clear range");
          for (std::size_t k = 0; k < w; ++k) state[a + k] = V{};
          break;
        case Kind::Resize:
          // grows by at least 1/8 (amortised O(1) per slot over many small relocations), not the
          // vector's default doubling, which would hold up to twice the state after an update
          if (a > state.capacity()) state.reserve(std::max(a, state.capacity() + state.capacity() / 8));
          state.resize(a, V{});
          break;
        case Kind::Remap: {
          scratch.assign(a, V{});
          for (std::int64_t s = 0; s < e.a; ++s) {
            const std::int64_t src = remap_sources_[static_cast<std::size_t>(e.b + s)];
            if (src >= 0)
              for (std::size_t k = 0; k < w; ++k)
                scratch[static_cast<std::size_t>(s) * w + k] = state[static_cast<std::size_t>(src) * w + k];
          }
          std::swap(state, scratch);
          break;
        }
      }
    }
  }

  // Appends another log's events after this one's (as if they had been recorded here).
  void append(const SlotLog& other) {
    const auto offset = static_cast<std::int64_t>(remap_sources_.size());
    for (Event e : other.events_) {
      if (e.kind == Kind::Remap) e.b += offset;
      events_.push_back(e);
    }
    remap_sources_.insert(remap_sources_.end(), other.remap_sources_.begin(), other.remap_sources_.end());
  }

private:
  std::size_t max_events_ = 0;
  std::function<void(const SlotLog&)> sink_;
  std::vector<Event> events_;
  std::vector<std::int64_t> remap_sources_;
};

}  // namespace sprig
