// sprig/io/checkpoint_sections.hpp — the sections of a training-state file, one writer and
// one reader each (layout: docs/checkpoint_format.md; contract: io/checkpoint.hpp). A reader
// validates its section against the target and returns what it decoded without changing the
// target; a staged parameter or a decoded image is then committed by non-throwing moves,
// once every section has been read.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../core/aligned_allocator.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../dst/algorithm.hpp"
#include "../nn/model.hpp"
#include "../nn/sequential.hpp"
#include "binary_format.hpp"
#include "checkpoint_kinds.hpp"
#include "padded_csr_file.hpp"

namespace sprig {

// Where the training loop is: the next step to run and the data position. With the
// counter-based generators, (seed, epoch, batch) restores the data order exactly
// (data/batches.hpp: the order of an epoch is a function of seed and epoch).
struct TrainingProgress {
  std::int64_t step = 0;    // training steps completed (the t of the next step)
  std::uint64_t epoch = 0;  // current epoch
  std::int64_t batch = 0;   // next batch within the epoch
  std::uint64_t seed = 0;   // data-order seed
  bool operator==(const TrainingProgress&) const = default;
};

// What defined a run, as the program names it: (key, value) pairs, in the program's order.
// Keys are non-empty, at most 256 bytes of printable ASCII (0x20-0x7E) and distinct; values
// are any bytes, at most 65536. The library stores and returns them; comparing them with a
// new run's options is the program's business.
using RunSettings = std::vector<std::pair<std::string, std::string>>;

namespace detail::ckpt {

// ---- "MODL": model structure ---------------------------------------------------------------------

// One entry: a layer of a Sequential, or a parameter of any other TrainableModel.
struct StructureEntry {
  std::uint8_t kind = 0;
  std::int64_t in = 0;
  std::int64_t out = 0;
};

template <class M>
inline constexpr bool is_sequential = false;
template <Value T, ColumnIndex Index>
inline constexpr bool is_sequential<Sequential<T, Index>> = true;

template <class M>
constexpr const char* entry_noun() {
  return is_sequential<M> ? "layer" : "parameter";
}

template <TrainableModel M>
std::vector<StructureEntry> structure(const M& model) {
  std::vector<StructureEntry> out;
  if constexpr (is_sequential<M>) {
    for (std::size_t k = 0; k < model.size(); ++k)
      std::visit(
          [&](const auto& l) {
            StructureEntry e{LayerKind<std::remove_cvref_t<decltype(l)>>::code, 0, 0};
            if constexpr (requires { l.in_features(); }) {
              e.in = l.in_features();
              e.out = l.out_features();
            }
            out.push_back(e);
          },
          model.layer(k));
  } else {
    model.for_each_parameter([&](const auto& p) {
      using Kind = ParameterKind<std::remove_cvref_t<decltype(p)>>;
      if constexpr (std::is_same_v<Kind, DenseKind>)
        out.push_back({Kind::code, p.cols, p.rows});
      else
        out.push_back({Kind::code, p.matrix.cols(), p.matrix.rows()});
    });
  }
  return out;
}

template <TrainableModel M>
void put_structure(binary::Writer& w, const M& model) {
  const std::vector<StructureEntry> entries = structure(model);
  w.begin_section(kModel);
  w.put(static_cast<std::uint32_t>(entries.size()));
  for (const StructureEntry& e : entries) {
    w.put(e.kind);
    w.put(e.in);
    w.put(e.out);
  }
  w.end_section();
}

// Throws unless the section records the target's structure.
template <TrainableModel M>
void check_structure(binary::Reader r, const M& target) {
  constexpr const char* noun = entry_noun<M>();
  const std::vector<StructureEntry> want = structure(target);
  const std::int64_t at = r.offset();
  const auto count = r.get<std::uint32_t>("layer count");
  if (count != want.size())
    r.fail_at(at, "shape mismatch: the checkpoint has ", count, " ", noun, "s, the model has ", want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    const std::int64_t at_entry = r.offset();
    const auto kind = r.get<std::uint8_t>("layer kind");
    const auto in = r.get<std::int64_t>("in features");
    const auto out = r.get<std::int64_t>("out features");
    if (kind != want[k].kind)
      r.fail_at(at_entry, noun, " ", k, " is a ", structure_kind_name(kind), " in the checkpoint but a ",
                structure_kind_name(want[k].kind), " in the model");
    if (in != want[k].in || out != want[k].out)
      r.fail_at(at_entry, "shape mismatch: ", noun, " ", k, " (", structure_kind_name(kind), ") is ", out, "x", in,
                " (out x in) in the checkpoint but ", want[k].out, "x", want[k].in, " in the model");
  }
  r.expect_end();
}

// ---- "SPAR", "DENS", "BSPR": parameters -------------------------------------------------------------

// State vectors as saved: a present flag each (non-empty), then the values of the present ones.
template <class States, class PutOne>
void put_states(binary::Writer& w, const States& states, PutOne&& put_one) {
  w.put(static_cast<std::uint8_t>(states.size()));
  for (const auto& s : states) {
    w.put_bool(!s.empty());
    if (!s.empty()) put_one(s);
  }
}

// The same for a sparse parameter, whose step counts (16-bit, if any) are saved widened as
// state vector 2, where AdamW keeps counts that do not fit 16 bits: one checkpoint layout for
// both (AdamW narrows them again on its next update).
template <class P, class PutOne>
void put_sparse_states(binary::Writer& w, const P& p, PutOne&& put_one) {
  using Vec = typename decltype(p.state)::value_type;
  if (p.step_counts.empty()) return put_states(w, p.state, put_one);
  constexpr std::size_t kCounts = 2;
  if (p.state.size() > kCounts && !p.state[kCounts].empty())
    throw ArgumentError("sprig::save_training_state: a parameter holds both 16-bit step counts and state vector 2");
  const std::size_t n = std::max(p.state.size(), kCounts + 1);
  w.put(static_cast<std::uint8_t>(n));
  for (std::size_t k = 0; k < n; ++k) {
    if (k == kCounts) {
      w.put_bool(true);
      put_one(Vec(p.step_counts.begin(), p.step_counts.end()));
      continue;
    }
    const bool present = k < p.state.size() && !p.state[k].empty();
    w.put_bool(present);
    if (present) put_one(p.state[k]);
  }
}
template <Value T>
void get_states(binary::Reader& r, std::int64_t count, std::vector<AlignedVector<T>>& out, std::vector<bool>& present) {
  const auto n = r.get<std::uint8_t>("state count");
  out.assign(n, {});
  present.assign(n, false);
  for (std::uint8_t k = 0; k < n; ++k) {
    present[k] = r.get_bool("state present flag");
    if (present[k]) r.get_array<T>(count, out[k], "state values");
  }
}

template <class P>
void put_parameter(binary::Writer& w, const P& p) {
  using T = typename P::value_type;
  using Kind = ParameterKind<P>;
  p.check_aligned("sprig::save_training_state");
  if (p.state.size() > 255) throw ArgumentError("sprig::save_training_state: more than 255 state vectors");
  w.begin_section(Kind::tag);
  if constexpr (std::is_same_v<Kind, BlockSparseKind>) {
    w.put_bool(p.decay);
    put_block_sparse(w, p.matrix);
    put_sparse_states(w, p, [&](const AlignedVector<T>& s) { put_block_live(w, p.matrix.pattern(), s, p.kBlockSize); });
  } else if constexpr (std::is_same_v<Kind, SparseKind>) {
    w.put_bool(p.decay);
    put_sparse(w, p.matrix);
    put_sparse_states(w, p, [&](const AlignedVector<T>& s) { put_live(w, p.matrix, s); });
  } else {
    w.put(p.rows);
    w.put(p.cols);
    w.put_bool(p.decay);
    w.put_array(std::span<const T>(p.value));
    put_states(w, p.state, [&](const AlignedVector<T>& s) { w.put_array(std::span<const T>(s)); });
  }
  w.end_section();
}

// A parameter decoded and validated, waiting to replace its target's contents.
class StagedParameter {
public:
  virtual ~StagedParameter() = default;
  virtual void commit() noexcept = 0;
};

// A sparse or block-sparse parameter: the whole parameter (weight, zero gradient, state, decay).
template <class P>
class StagedWhole final : public StagedParameter {
public:
  StagedWhole(P& target, P staged) noexcept : target_(target), staged_(std::move(staged)) {}
  void commit() noexcept override { target_ = std::move(staged_); }

private:
  P& target_;
  P staged_;
};

// A dense parameter: values, state and decay; its gradient is zeroed in place.
template <class P>
class StagedDense final : public StagedParameter {
public:
  using T = typename P::value_type;
  StagedDense(P& target, AlignedVector<T> value, std::vector<AlignedVector<T>> state, bool decay) noexcept
      : target_(target), value_(std::move(value)), state_(std::move(state)), decay_(decay) {}
  void commit() noexcept override {
    target_.value = std::move(value_);
    std::fill(target_.grad.begin(), target_.grad.end(), T(0));
    target_.state = std::move(state_);
    target_.decay = decay_;
  }

private:
  P& target_;
  AlignedVector<T> value_;
  std::vector<AlignedVector<T>> state_;
  bool decay_;
};

// Reads parameter k's section into a staged copy of `p` (not changed).
template <class P>
std::unique_ptr<StagedParameter> stage_block_sparse(binary::Reader r, P& p, std::size_t k) {
  using T = typename P::value_type;
  using Index = typename P::index_type;
  using W = decltype(P::matrix);
  P s;
  s.decay = r.get_bool("decay flag");
  const std::int64_t at = r.offset();
  const auto image = get_block_sparse<T, Index, W::kBlockRows, W::kBlockCols>(r);
  if (image.rows != p.matrix.rows() || image.cols != p.matrix.cols())
    r.fail_at(at, "shape mismatch: parameter ", k, " is a ", image.rows, "x", image.cols, " ", BlockSparseKind::matrix,
              " in the checkpoint but ", p.matrix.rows(), "x", p.matrix.cols(), " in the model");
  std::vector<AlignedVector<T>> packed;
  std::vector<bool> present;
  get_states<T>(r, image.pattern.nnz * P::kBlockSize, packed, present);
  r.expect_end();
  s.matrix = build_block<T, Index, W::kBlockRows, W::kBlockCols>(image);
  s.grad.assign(static_cast<std::size_t>(s.entry_count()), T(0));
  s.state.resize(packed.size());
  for (std::size_t q = 0; q < packed.size(); ++q)
    if (present[q]) s.state[q] = scatter_block_live(s.matrix.pattern(), packed[q], P::kBlockSize);
  return std::make_unique<StagedWhole<P>>(p, std::move(s));
}

template <class P>
std::unique_ptr<StagedParameter> stage_sparse(binary::Reader r, P& p, std::size_t k) {
  using T = typename P::value_type;
  using Index = typename P::index_type;
  P s;
  s.decay = r.get_bool("decay flag");
  const std::int64_t at = r.offset();
  const auto image = get_sparse<T, Index>(r);
  if (image.rows != p.matrix.rows() || image.cols != p.matrix.cols())
    r.fail_at(at, "shape mismatch: parameter ", k, " is a ", image.rows, "x", image.cols, " ", SparseKind::matrix,
              " in the checkpoint but ", p.matrix.rows(), "x", p.matrix.cols(), " in the model");
  std::vector<AlignedVector<T>> packed;
  std::vector<bool> present;
  get_states<T>(r, image.nnz, packed, present);
  r.expect_end();
  s.matrix = build(image);
  s.grad.assign(static_cast<std::size_t>(s.matrix.storage_size()), T(0));
  s.state.resize(packed.size());
  for (std::size_t q = 0; q < packed.size(); ++q)
    if (present[q]) s.state[q] = scatter_live(s.matrix, packed[q]);
  return std::make_unique<StagedWhole<P>>(p, std::move(s));
}

template <class P>
std::unique_ptr<StagedParameter> stage_dense(binary::Reader r, P& p, std::size_t k) {
  using T = typename P::value_type;
  const std::int64_t at = r.offset();
  const auto rows = r.get<std::int64_t>("rows");
  const auto cols = r.get<std::int64_t>("cols");
  if (rows != p.rows || cols != p.cols)
    r.fail_at(at, "shape mismatch: parameter ", k, " is a ", rows, "x", cols, " ", DenseKind::matrix,
              " in the checkpoint but ", p.rows, "x", p.cols, " in the model");
  const bool decay = r.get_bool("decay flag");
  AlignedVector<T> value;
  r.get_array<T>(p.size(), value, "values");
  std::vector<AlignedVector<T>> state;
  std::vector<bool> present;
  get_states<T>(r, p.size(), state, present);
  r.expect_end();
  return std::make_unique<StagedDense<P>>(p, std::move(value), std::move(state), decay);
}

// Sections next, next + 1, ... (one per parameter of `model`, advancing next), staged.
template <TrainableModel M>
std::vector<std::unique_ptr<StagedParameter>> stage_parameters(const binary::Container& c, std::size_t& next,
                                                               M& model) {
  std::vector<std::unique_ptr<StagedParameter>> staged;
  model.for_each_parameter([&](auto& p) {
    using Kind = ParameterKind<std::remove_cvref_t<decltype(p)>>;
    const std::size_t k = staged.size();  // the parameter's index, for messages
    if constexpr (std::is_same_v<Kind, BlockSparseKind>)
      staged.push_back(stage_block_sparse(section(c, next++, Kind::tag, "a block-sparse parameter"), p, k));
    else if constexpr (std::is_same_v<Kind, SparseKind>)
      staged.push_back(stage_sparse(section(c, next++, Kind::tag, "a sparse parameter"), p, k));
    else
      staged.push_back(stage_dense(section(c, next++, Kind::tag, "a dense parameter"), p, k));
  });
  return staged;
}

// ---- "OPTM": optimizer --------------------------------------------------------------------------

struct OptimizerImage {
  std::int64_t step = 0;
  double lr = 0;
};

template <class O>
void put_optimizer(binary::Writer& w, const O& o) {
  using Kind = OptimizerKind<O>;
  const std::vector<double> options = Kind::options(o);
  w.begin_section(kOptimizer);
  w.put(Kind::code);
  w.put(o.step_count());
  w.put(o.lr());
  w.put(static_cast<std::uint8_t>(options.size()));
  w.put_array(std::span<const double>(options));
  w.end_section();
}

// Throws unless the section holds the target's kind and options; returns its step and LR.
template <class O>
OptimizerImage get_optimizer(binary::Reader r, const O& target) {
  using Kind = OptimizerKind<O>;
  const std::vector<double> mine = Kind::options(target);
  OptimizerImage saved;
  const std::int64_t at = r.offset();
  const auto code = r.get<std::uint8_t>("optimizer kind");
  if (code != Kind::code)
    r.fail_at(at, "the checkpoint's optimizer is ", optimizer_name(code), ", the target is ", Kind::name);
  const std::int64_t at_step = r.offset();
  saved.step = r.get<std::int64_t>("step count");
  if (saved.step < 0) r.fail_at(at_step, "step count ", saved.step, " < 0");
  const std::int64_t at_lr = r.offset();
  saved.lr = r.get<double>("lr");
  if (!(saved.lr >= 0.0) || !std::isfinite(saved.lr)) r.fail_at(at_lr, "lr ", saved.lr, " is not a finite value >= 0");
  const std::int64_t at_n = r.offset();
  const auto n = r.get<std::uint8_t>("option count");
  if (std::size_t{n} != mine.size() && std::size_t{n} != Kind::older_option_count)
    r.fail_at(at_n, "the ", Kind::name, " section has ", int(n), " options, expected ", mine.size());
  for (std::size_t q = 0; q < n; ++q) {
    const std::int64_t at_o = r.offset();
    const auto v = r.get<double>("option");
    if (std::bit_cast<std::uint64_t>(v) != std::bit_cast<std::uint64_t>(mine[q]))
      r.fail_at(at_o, "optimizer option ", Kind::option_names[q], " is ", v, " in the checkpoint but ", mine[q],
                " in the target optimizer (build it with the saved options)");
  }
  r.expect_end();
  return saved;
}

// ---- "DST ": the algorithm and its schedule ----------------------------------------------------------

inline void put_schedule(binary::Writer& w, const dst::UpdateSchedule& s) {
  w.put(s.delta_t);
  w.put(s.t_begin);
  w.put(s.t_end);
  w.put(s.alpha);
}
inline dst::UpdateSchedule get_schedule(binary::Reader& r) {
  dst::UpdateSchedule s;
  s.delta_t = r.get<std::int64_t>("delta_t");
  s.t_begin = r.get<std::int64_t>("t_begin");
  s.t_end = r.get<std::int64_t>("t_end");
  s.alpha = r.get<double>("alpha");
  return s;
}
inline bool same_schedule(const dst::UpdateSchedule& a, const dst::UpdateSchedule& b) noexcept {
  return a.delta_t == b.delta_t && a.t_begin == b.t_begin && a.t_end == b.t_end &&
         std::bit_cast<std::uint64_t>(a.alpha) == std::bit_cast<std::uint64_t>(b.alpha);
}

// What a file holds of an algorithm's state beyond what the target must match.
struct AlgorithmImage {
  double compact_threshold = 0;
  std::int64_t updates = 0;
  double seconds = 0.0;
  bool extras = false;  // constant_fan_in and the exclusions are present (newer files)
  bool constant_fan_in = false;
  std::vector<std::int64_t> excluded;

  // Moves the image into `a`: cannot throw (the exclusions were validated when read).
  template <class A>
  void restore(A& a) && noexcept {
    a.compact_threshold = compact_threshold;
    a.restore_counters(updates, seconds);
    if (extras) {
      a.constant_fan_in = constant_fan_in;
      a.set_excluded_layers(std::move(excluded));
    }
  }
};

template <class A>
void put_algorithm(binary::Writer& w, const A* algorithm) {
  w.begin_section(kDST);
  w.put_bool(algorithm != nullptr);
  if (algorithm) {
    w.put_string(algorithm->name());
    put_schedule(w, algorithm->schedule());
    w.put(algorithm->seed());
    w.put(algorithm->compact_threshold);
    w.put(algorithm->updates());
    w.put(algorithm->total_seconds());
    w.put_bool(algorithm->constant_fan_in);
    const auto& excluded = algorithm->excluded_layers();
    w.put(static_cast<std::int64_t>(excluded.size()));
    w.put_array(std::span<const std::int64_t>(excluded));
    const std::vector<double> config = algorithm->configuration();
    w.put(static_cast<std::int64_t>(config.size()));
    w.put_array(std::span<const double>(config));
  }
  w.end_section();
}

// The fields after total_seconds (newer files): constant_fan_in, exclusions, configuration.
template <class A>
void get_algorithm_extras(binary::Reader& r, const A* target, const std::string& name, AlgorithmImage& image) {
  image.extras = true;
  image.constant_fan_in = r.get_bool("constant_fan_in");
  const std::int64_t at_ex = r.offset();
  r.get_array<std::int64_t>(r.get_count("excluded layer count"), image.excluded, "excluded layers");
  const auto& ex = image.excluded;
  for (std::size_t q = 0; q < ex.size(); ++q)
    if (ex[q] < 0 || (q > 0 && ex[q] <= ex[q - 1]))
      r.fail_at(at_ex, "excluded layers are not distinct non-negative ascending indices");
  const std::int64_t at_cfg = r.offset();
  std::vector<double> config;
  r.get_array<double>(r.get_count("configuration count"), config, "configuration");
  if (!target) return;
  const std::vector<double> mine = target->configuration();
  bool same = config.size() == mine.size();
  for (std::size_t q = 0; same && q < config.size(); ++q)
    same = std::bit_cast<std::uint64_t>(config[q]) == std::bit_cast<std::uint64_t>(mine[q]);
  if (!same)
    r.fail_at(at_cfg, "the DST configuration differs: the checkpoint's ", name, " has ", config.size(),
              " configuration values, the target's ", mine.size(),
              " (or other values; build the algorithm with the saved options)");
}

// Throws unless the section matches `target` (name, schedule, seed, configuration) or, with
// no target, is well formed. A file without algorithm state reads as an empty image.
template <class A>
AlgorithmImage get_algorithm(binary::Reader r, const A* target) {
  AlgorithmImage image;
  const bool present = r.get_bool("DST present flag");
  if (!present && target)
    r.fail("the checkpoint has no DST algorithm state but a ", target->name(), " algorithm was given");
  if (!present) {
    r.expect_end();
    return image;
  }
  const std::int64_t at = r.offset();
  const std::string name = r.get_string("algorithm name", 64);
  const dst::UpdateSchedule s = get_schedule(r);
  const auto seed = r.get<std::uint64_t>("seed");
  const std::int64_t at_ct = r.offset();
  image.compact_threshold = r.get<double>("compact_threshold");
  image.updates = r.get_count("updates");
  image.seconds = r.get<double>("total_seconds");
  if (!(image.seconds >= 0.0) || !std::isfinite(image.seconds))
    r.fail_at(r.offset() - 8, "total_seconds ", image.seconds, " is not a finite non-negative time");
  if (r.remaining() > 0) get_algorithm_extras(r, target, name, image);  // older files end here
  r.expect_end();
  if (!target) return image;
  const auto& m = target->schedule();
  if (name != target->name())
    r.fail_at(at, "the checkpoint's DST algorithm is '", name, "', the target is '", target->name(), "'");
  if (!same_schedule(s, m))
    r.fail_at(at, "the DST schedule differs: checkpoint delta_t ", s.delta_t, ", t_begin ", s.t_begin, ", t_end ",
              s.t_end, ", alpha ", s.alpha, "; target ", m.delta_t, ", ", m.t_begin, ", ", m.t_end, ", ", m.alpha);
  if (seed != target->seed()) r.fail_at(at, "the DST seed differs: checkpoint ", seed, ", target ", target->seed());
  if (!std::isfinite(image.compact_threshold))
    r.fail_at(at_ct, "compact_threshold ", image.compact_threshold, " is not finite");
  return image;
}

// ---- "PROG": progress -----------------------------------------------------------------------------

inline void put_progress(binary::Writer& w, const TrainingProgress& p) {
  w.begin_section(kProgress);
  w.put(p.step);
  w.put(p.epoch);
  w.put(p.batch);
  w.put(p.seed);
  w.end_section();
}
inline TrainingProgress get_progress(binary::Reader r) {
  TrainingProgress p;
  p.step = r.get_count("step");
  p.epoch = r.get<std::uint64_t>("epoch");
  p.batch = r.get_count("batch");
  p.seed = r.get<std::uint64_t>("seed");
  r.expect_end();
  return p;
}

// ---- "RUNS": run settings -----------------------------------------------------------------------

inline constexpr std::size_t kMaxSettingKey = 256;
inline constexpr std::size_t kMaxSettingValue = 65536;

// Why entry k's key cannot be stored beside the earlier keys, or empty when it can. O(k) per
// entry: settings are a few dozen options.
inline std::string setting_key_problem(const RunSettings& s, std::size_t k) {
  const std::string& key = s[k].first;
  if (key.empty()) return message("setting ", k, " has an empty key");
  if (key.size() > kMaxSettingKey)
    return message("setting ", k, " has a key of ", key.size(), " bytes, more than ", kMaxSettingKey);
  for (const char ch : key)
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7E)
      return message("setting ", k, "'s key has the non-printable byte ", int(static_cast<unsigned char>(ch)));
  for (std::size_t q = 0; q < k; ++q)
    if (s[q].first == key) return message("settings ", q, " and ", k, " have the same key '", key, "'");
  return {};
}

// Nothing when there are no settings (so such files are as before the section existed).
inline void put_settings(binary::Writer& w, const RunSettings& s) {
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (std::string problem = setting_key_problem(s, k); !problem.empty())
      throw ArgumentError(message("sprig::save_training_state: ", problem));
    if (s[k].second.size() > kMaxSettingValue)
      throw ArgumentError(message("sprig::save_training_state: setting '", s[k].first, "' has a value of ",
                                  s[k].second.size(), " bytes, more than ", kMaxSettingValue));
  }
  if (s.size() > std::numeric_limits<std::uint32_t>::max())
    throw ArgumentError(message("sprig::save_training_state: ", s.size(), " settings"));
  if (s.empty()) return;
  w.begin_section(kSettings);
  w.put(static_cast<std::uint32_t>(s.size()));
  for (const auto& [key, value] : s) {
    w.put_string(key);
    w.put_string(value);
  }
  w.end_section();
}

// The "RUNS" payload, validated as put_settings validates at save (FormatError instead).
inline RunSettings get_settings(binary::Reader r) {
  const std::int64_t at = r.offset();
  const auto n = r.get<std::uint32_t>("setting count");
  if (n > r.remaining() / 8)  // each entry holds two u32 lengths
    r.fail_at(at, "setting count ", n, " needs at least ", std::uint64_t{n} * 8, " bytes, the section has ",
              r.remaining(), " left");
  RunSettings s;
  s.reserve(n);
  for (std::uint32_t k = 0; k < n; ++k) {
    const std::int64_t at_key = r.offset();
    s.emplace_back(r.get_string("setting key", kMaxSettingKey), std::string());
    if (std::string problem = setting_key_problem(s, k); !problem.empty()) r.fail_at(at_key, problem);
    s.back().second = r.get_string("setting value", kMaxSettingValue);
  }
  r.expect_end();
  return s;
}

}  // namespace detail::ckpt
}  // namespace sprig
