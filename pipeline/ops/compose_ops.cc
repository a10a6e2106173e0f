#include "pipeline/ops/compose_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/core/op_schema.h"

namespace prepflow {
namespace {

using proto::Stage;
using Stages = google::protobuf::RepeatedPtrField<Stage>;

// How deeply compositions nest in `stage` (0: it is none).
int Depth(const Stage& stage) {
  const Stages* inner = InnerStages(stage);
  if (inner == nullptr) return 0;
  int deepest = 0;
  for (const Stage& s : *inner) deepest = std::max(deepest, Depth(s));
  return deepest + 1;
}

absl::Status Prefixed(const std::string& where, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}

// What the three share: the inner ops, built and run.
class ComposeOp : public Op {
 protected:
  // Builds the inner stages of `stage` with `registry`.
  absl::Status Build(const Stage& stage, const OpRegistry& registry) {
    const Stages& stages = *InnerStages(stage);
    if (stages.empty()) return absl::InvalidArgumentError("stages: give at least one");
    if (stages.size() > kMaxInnerStages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stages: ", stages.size(), " of them; at most ", kMaxInnerStages, " are allowed"));
    }
    if (Depth(stage) > kMaxComposeDepth) {
      return absl::InvalidArgumentError(absl::StrCat("stages: compositions nest ", Depth(stage),
                                                     " deep; at most ", kMaxComposeDepth));
    }
    for (int j = 0; j < stages.size(); ++j) {
      Stage inner = stages[j];
      const std::string name =
          absl::StrCat("stages[", j, "] (", OpRegistry::OpName(inner.op_case()), ")");
      if (inner.op_case() == Stage::kDecode) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": decode comes first in a pipeline, never inside a composition"));
      }
      if (absl::Status s = ApplyDefaults(&inner); !s.ok()) return Prefixed(name, s);
      auto op = registry.Create(inner);
      if (!op.ok()) return Prefixed(name, op.status());
      inner_.push_back(*std::move(op));
      names_.push_back(name);
    }
    return absl::OkStatus();
  }

  int size() const { return static_cast<int>(inner_.size()); }

  absl::Status Open(const OpEnvironment& env) override {
    for (size_t j = 0; j < inner_.size(); ++j) {
      if (absl::Status s = inner_[j]->Open(env); !s.ok()) return Prefixed(names_[j], s);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ValueType> InnerType(int j, const ValueType& in) const {
    absl::StatusOr<ValueType> out = inner_[j]->OutputType(in);
    if (!out.ok()) return Prefixed(names_[j], out.status());
    return out;
  }

  // Inner stage j takes `in` to `in` again, or an error saying so.
  absl::Status KeepsType(int j, const ValueType& in, const char* why) const {
    absl::StatusOr<ValueType> out = InnerType(j, in);
    if (!out.ok()) return out.status();
    if (*out == in) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(names_[j], ": turns ", in.DebugString(),
                                                   " into ", out->DebugString(), "; ", why));
  }

  // Runs inner stage j on its own substream. Inner stages never write into
  // the pipeline's sink (it copies what the last stage leaves elsewhere).
  absl::Status RunInner(int j, const StageContext& ctx, Sample& s) const {
    StageContext inner = ctx;
    inner.substream = ctx.substream * 256 + static_cast<uint64_t>(j) + 1;
    inner.sink = nullptr;
    inner.sink_bytes = 0;
    inner.last = false;
    absl::Status st = inner_[j]->Apply(inner, s);
    return st.ok() ? st : Prefixed(names_[j], st);
  }

 private:
  std::vector<std::unique_ptr<Op>> inner_;
  std::vector<std::string> names_;
};

// torchvision's RandomApply: `if self.p < torch.rand(1): return img`.
class RandomApplyOp : public ComposeOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage,
                                                    const OpRegistry& registry) {
    auto op = std::make_unique<RandomApplyOp>();
    op->p_ = stage.random_apply().p();
    if (!(op->p_ >= 0 && op->p_ <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("p: must be in [0, 1], got ", op->p_));
    }
    if (absl::Status s = op->Build(stage, registry); !s.ok()) return s;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    ValueType t = in;
    for (int j = 0; j < size(); ++j) {
      absl::StatusOr<ValueType> out = InnerType(j, t);
      if (!out.ok()) return out.status();
      t = *out;
    }
    if (t == in) return t;
    return absl::InvalidArgumentError(absl::StrCat("its stages turn ", in.DebugString(), " into ",
                                                   t.DebugString(), ", and skipping them leaves ",
                                                   in.DebugString(),
                                                   ": every sample must come out the same type"));
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    if (p_ < rng.Uniform()) return absl::OkStatus();
    for (int j = 0; j < size(); ++j) {
      if (absl::Status st = RunInner(j, ctx, s); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

 private:
  double p_ = 0.5;
};

// torchvision's RandomChoice: `random.choices(self.transforms, weights=p)`.
class RandomChoiceOp : public ComposeOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage,
                                                    const OpRegistry& registry) {
    auto op = std::make_unique<RandomChoiceOp>();
    if (absl::Status s = op->Build(stage, registry); !s.ok()) return s;
    const auto& p = stage.random_choice().p();
    if (!p.empty() && p.size() != op->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("p: ", p.size(), " weights for ", op->size(), " stages"));
    }
    double total = 0;
    for (double w : p) {
      if (!(w >= 0 && std::isfinite(w))) {
        return absl::InvalidArgumentError(absl::StrCat("p: weights must be >= 0, got ", w));
      }
      total += w;
      op->cumulative_.push_back(total);  // itertools.accumulate
    }
    if (!p.empty() && !(total > 0)) {
      return absl::InvalidArgumentError("p: the weights sum to 0");
    }
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    absl::StatusOr<ValueType> first = InnerType(0, in);
    if (!first.ok()) return first.status();
    for (int j = 1; j < size(); ++j) {
      absl::StatusOr<ValueType> out = InnerType(j, in);
      if (!out.ok()) return out.status();
      if (*out != *first) {
        return absl::InvalidArgumentError(
            absl::StrCat("stages[0] gives ", first->DebugString(), " but stages[", j, "] gives ",
                         out->DebugString(), ": every sample must come out the same type"));
      }
    }
    return first;
  }

  // random.choices: without weights population[floor(random() * n)]; with
  // them the first whose cumulative weight exceeds random() * total.
  int Pick(SampleRng& rng) const {
    const double u = rng.Uniform();
    if (cumulative_.empty()) return static_cast<int>(std::floor(u * size()));
    const double x = u * cumulative_.back();
    const auto at = std::upper_bound(cumulative_.begin(), cumulative_.end() - 1, x);
    return static_cast<int>(at - cumulative_.begin());
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    return RunInner(Pick(rng), ctx, s);
  }

 private:
  std::vector<double> cumulative_;
};

// torchvision's RandomOrder: `random.shuffle(order)`, then each in turn.
class RandomOrderOp : public ComposeOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage,
                                                    const OpRegistry& registry) {
    auto op = std::make_unique<RandomOrderOp>();
    if (absl::Status s = op->Build(stage, registry); !s.ok()) return s;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    for (int j = 0; j < size(); ++j) {
      if (absl::Status s = KeepsType(j, in, "in a random order each stage must keep the type");
          !s.ok()) {
        return s;
      }
    }
    return in;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    std::array<int, kMaxInnerStages> order;
    std::iota(order.begin(), order.begin() + size(), 0);
    for (int i = size() - 1; i > 0; --i) {  // random.shuffle
      std::swap(order[i], order[rng.UniformInt(0, i)]);
    }
    for (int i = 0; i < size(); ++i) {
      if (absl::Status st = RunInner(order[i], ctx, s); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
};

template <typename T>
OpFactory ComposeFactory(const OpRegistry* registry) {
  return [registry](const Stage& stage) { return T::Create(stage, *registry); };
}

}  // namespace

const Stages* InnerStages(const Stage& stage) {
  switch (stage.op_case()) {
    case Stage::kRandomApply:
      return &stage.random_apply().stages();
    case Stage::kRandomChoice:
      return &stage.random_choice().stages();
    case Stage::kRandomOrder:
      return &stage.random_order().stages();
    default:
      return nullptr;
  }
}

Stages* MutableInnerStages(Stage* stage) {
  switch (stage->op_case()) {
    case Stage::kRandomApply:
      return stage->mutable_random_apply()->mutable_stages();
    case Stage::kRandomChoice:
      return stage->mutable_random_choice()->mutable_stages();
    case Stage::kRandomOrder:
      return stage->mutable_random_order()->mutable_stages();
    default:
      return nullptr;
  }
}

void RegisterComposeOps(OpRegistry* registry) {
  registry->Register(Stage::kRandomApply, ComposeFactory<RandomApplyOp>(registry));
  registry->Register(Stage::kRandomChoice, ComposeFactory<RandomChoiceOp>(registry));
  registry->Register(Stage::kRandomOrder, ComposeFactory<RandomOrderOp>(registry));
}

}  // namespace prepflow
