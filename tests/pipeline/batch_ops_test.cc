// MixUp and CutMix on assembled batches: the arithmetic (float32, torch's
// order), the box, the soft labels, the Beta draws, and validation.
// tests/python/test_parity.py checks the same against torch's own ops on
// loader batches.
#include "pipeline/ops/batch_ops.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

constexpr int kC = 3, kH = 8, kW = 10;

ValueType TensorType() { return ValueType{ValueKind::kTensor, {kC, kH, kW}}; }

// A batch of n samples: sample i is filled with i + 1 plus a ramp, labels
// i % classes.
std::unique_ptr<Batch> MakeBatch(int n, int classes, int64_t number = 0) {
  auto batch = std::make_unique<Batch>(TensorType(), n);
  std::vector<int64_t> indices(n);
  for (int i = 0; i < n; ++i) indices[i] = 100 + i;
  batch->Reset(2, number, indices);
  for (int i = 0; i < n; ++i) {
    auto* x = reinterpret_cast<float*>(batch->slot(i));
    for (int k = 0; k < kC * kH * kW; ++k) x[k] = static_cast<float>(i + 1) + 0.01f * k;
    batch->FinishOk(i, i % classes, 0);
  }
  return batch;
}

proto::MixupCutmix Spec(double mixup, double cutmix) {
  proto::MixupCutmix p;
  p.set_mixup_alpha(mixup);
  p.set_cutmix_alpha(cutmix);
  p.set_p(1);
  p.set_switch_prob(0.5);
  return p;
}

TEST(MixupCutmix, MixupBlendsEachSampleWithThePreviousInFloat32) {
  auto op = MixupCutmix::Create(Spec(0.4, 0), TensorType(), 4);
  ASSERT_TRUE(op.ok()) << op.status();
  for (int64_t number = 0; number < 20; ++number) {
    auto batch = MakeBatch(5, 4, number), original = MakeBatch(5, 4, number);
    ASSERT_TRUE((*op)->Apply(7, batch.get()).ok());
    // Sample i has label i % 4; its soft label keeps lambda of its own
    // class and gives 1 - lambda to the previous sample's.
    const std::vector<float>& soft = batch->soft_labels();
    ASSERT_EQ(batch->num_classes(), 4);
    const float lambda = soft[1 * 4 + 1];
    EXPECT_NEAR(soft[1 * 4 + 0], 1 - lambda, 1e-6);  // float32(1 - lambda)
    // Sample 0 and the last (4) are both class 0: all of it stays there.
    EXPECT_FLOAT_EQ(soft[0 * 4 + 0], 1.0f);
    const double keep = soft[1 * 4 + 1];  // float32(lambda)
    for (int i = 0; i < 5; ++i) {
      const float* x = original->floats() + i * kC * kH * kW;
      const float* prev = original->floats() + ((i + 4) % 5) * kC * kH * kW;
      const float* y = batch->floats() + i * kC * kH * kW;
      for (int k = 0; k < kC * kH * kW; ++k) {
        const float want = x[k] * static_cast<float>(keep) + prev[k] * soft[1 * 4 + 0];
        ASSERT_EQ(y[k], want) << number << " " << i << " " << k;
      }
    }
  }
}

TEST(MixupCutmix, CutmixPastesOneBoxAndWeighsLabelsByItsArea) {
  auto op = MixupCutmix::Create(Spec(0, 1.0), TensorType(), 5);
  ASSERT_TRUE(op.ok()) << op.status();
  int boxes = 0;
  for (int64_t number = 0; number < 30; ++number) {
    auto batch = MakeBatch(4, 5, number), original = MakeBatch(4, 5, number);
    ASSERT_TRUE((*op)->Apply(3, batch.get()).ok());
    // The changed pixels of sample 1 are a box, equal to sample 0 there.
    int changed = 0, x0 = kW, x1 = -1, y0 = kH, y1 = -1;
    for (int y = 0; y < kH; ++y) {
      for (int x = 0; x < kW; ++x) {
        const int k = y * kW + x;  // channel 0
        const float got = batch->floats()[1 * kC * kH * kW + k];
        if (got == original->floats()[1 * kC * kH * kW + k]) continue;
        ASSERT_EQ(got, original->floats()[k]);
        ++changed, x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y),
                   y1 = std::max(y1, y);
      }
    }
    const double area = changed == 0 ? 0 : (x1 - x0 + 1) * (y1 - y0 + 1);
    EXPECT_EQ(changed, area);  // a full box
    const double lambda = 1.0 - area / (kH * kW);
    const std::vector<float>& soft = batch->soft_labels();
    EXPECT_EQ(soft[1 * 5 + 1], static_cast<float>(lambda)) << number;
    EXPECT_EQ(soft[1 * 5 + 0], static_cast<float>(1.0 - lambda)) << number;
    boxes += changed > 0;
  }
  EXPECT_GT(boxes, 20);  // most draws give a non-empty box
}

TEST(MixupCutmix, UnmixedBatchesGetOneHotLabels) {
  proto::MixupCutmix p = Spec(0.2, 0);
  p.set_p(0);
  auto op = MixupCutmix::Create(p, TensorType(), 3);
  ASSERT_TRUE(op.ok());
  auto batch = MakeBatch(4, 3), original = MakeBatch(4, 3);
  ASSERT_TRUE((*op)->Apply(1, batch.get()).ok());
  EXPECT_EQ(std::vector<float>(batch->floats(), batch->floats() + 4 * kC * kH * kW),
            std::vector<float>(original->floats(), original->floats() + 4 * kC * kH * kW));
  EXPECT_EQ(batch->soft_labels(), (std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0}));
}

TEST(MixupCutmix, BetaDrawsHaveBetasMoments) {
  // Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)); 20000 draws.
  for (double a : {0.2, 1.0, 3.0}) {
    double sum = 0, sum_sq = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      SampleRng rng(11, 0, i, 0);
      const double b = SampleBeta(rng, a);
      ASSERT_GE(b, 0);
      ASSERT_LE(b, 1);
      sum += b, sum_sq += b * b;
    }
    const double mean = sum / n, var = sum_sq / n - mean * mean;
    const double want_var = 1 / (4 * (2 * a + 1));
    EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(want_var / n)) << a;
    EXPECT_NEAR(var, want_var, 0.05 * want_var) << a;
  }
}

TEST(MixupCutmix, BadSpecsAndLabelsAreNamed) {
  EXPECT_THAT(MixupCutmix::Create(Spec(0, 0), TensorType(), 2).status().message(),
              HasSubstr("set at least one above 0"));
  EXPECT_THAT(MixupCutmix::Create(Spec(-1, 0), TensorType(), 2).status().message(),
              HasSubstr("mixup_alpha: must be 0 (off) or positive"));
  EXPECT_THAT(MixupCutmix::Create(Spec(NAN, 0), TensorType(), 2).status().message(),
              HasSubstr("mixup_alpha"));
  proto::MixupCutmix bad_p = Spec(1, 0);
  bad_p.set_p(1.5);
  EXPECT_THAT(MixupCutmix::Create(bad_p, TensorType(), 2).status().message(),
              HasSubstr("p: must be in [0, 1], got 1.5"));
  EXPECT_THAT(MixupCutmix::Create(Spec(1, 0), ValueType{ValueKind::kImage, {8, 8, 3}}, 2)
                  .status()
                  .message(),
              HasSubstr("needs fixed-size float32 CHW samples"));
  EXPECT_THAT(MixupCutmix::Create(Spec(1, 0), TensorType(), 0).status().message(),
              HasSubstr("num_classes: must be 1 to 1000000 (0 takes the dataset's, which has 0)"));
  auto op = MixupCutmix::Create(Spec(1, 0), TensorType(), 2);
  ASSERT_TRUE(op.ok());
  auto batch = MakeBatch(3, 3);  // labels 0, 1, 2: 2 is outside two classes
  const absl::Status s = (*op)->Apply(1, batch.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sample 102 has label 2, outside [0, num_classes = 2)"));
}

TEST(MixupCutmix, PipelineBatchStagesAreCheckedAsTheyComeIn) {
  // From pipeline text: more than one batch stage, an empty one, a class
  // count past the limit, and a pipeline without batch stages (none built).
  const struct {
    const char* text;
    const char* message;  // empty: accepted
  } cases[] = {
      {"batch_stages { mixup_cutmix { mixup_alpha: 1 } } "
       "batch_stages { mixup_cutmix { cutmix_alpha: 1 } }",
       "batch_stages: one is supported (mixup_cutmix does both), got 2"},
      {"batch_stages {}", "batch_stages: no op set (one of: mixup_cutmix)"},
      {"batch_stages { mixup_cutmix { mixup_alpha: 1 num_classes: 2000000 } }",
       "batch stage 0 (mixup_cutmix): num_classes: must be 1 to 1000000"},
      {"batch_stages { mixup_cutmix { mixup_alpha: 1 num_classes: -3 } }",
       "num_classes: must be 1 to 1000000"},
      {"batch_stages { mixup_cutmix { mixup_alpha: inf } }", "mixup_alpha: must be 0 (off)"},
      {"batch_stages { mixup_cutmix { mixup_alpha: 1 switch_prob: nan } }",
       "switch_prob: must be in [0, 1]"},
  };
  for (const auto& c : cases) {
    proto::PipelineSpec spec;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c.text, &spec)) << c.text;
    auto op = CreateBatchOps(spec, TensorType(), 10);
    EXPECT_THAT(op.status().message(), HasSubstr(c.message)) << c.text;
  }
  proto::PipelineSpec none;
  auto op = CreateBatchOps(none, TensorType(), 10);
  ASSERT_TRUE(op.ok());
  EXPECT_EQ(*op, nullptr);
}

}  // namespace
}  // namespace prepflow
