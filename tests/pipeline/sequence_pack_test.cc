// SequencePacker: rows of exactly `length` tokens that give the documents
// back exactly when unpacked (greedy and best-fit), best-fit's placement,
// and resuming from any row's PackPoint. tests/python/test_packing.py packs
// a tokenized corpus through the loader, offloaded and resumed.
#include "pipeline/core/sequence_pack.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Documents of the given lengths; document d's tokens are 1000 * (d + 1) + i.
std::vector<std::vector<int32_t>> Documents(const std::vector<int>& lengths) {
  std::vector<std::vector<int32_t>> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    docs.emplace_back();
    for (int i = 0; i < lengths[d]; ++i) docs.back().push_back(1000 * (int(d) + 1) + i);
  }
  return docs;
}

// Packs docs[from...] (document d has index d and position d), starting at `start`.
std::vector<PackedRow> Pack(const SequencePackOptions& options,
                            const std::vector<std::vector<int32_t>>& docs, PackPoint start = {}) {
  SequencePacker packer(options, start);
  std::vector<PackedRow> rows;
  for (size_t d = static_cast<size_t>(start.position); d < docs.size(); ++d) {
    packer.Add(docs[d], static_cast<int64_t>(d), static_cast<int64_t>(d));
    while (packer.ready() > 0) rows.push_back(packer.Take());
  }
  packer.Finish();
  while (packer.ready() > 0) rows.push_back(packer.Take());
  return rows;
}

// The documents put back together from the rows' pieces.
std::map<int64_t, std::vector<int32_t>> Unpack(const std::vector<PackedRow>& rows) {
  std::map<int64_t, std::map<int64_t, std::vector<int32_t>>> pieces;
  for (const PackedRow& row : rows) {
    int64_t at = 0;
    for (const PackedPiece& p : row.pieces) {
      pieces[p.index][p.offset].assign(row.tokens.begin() + at, row.tokens.begin() + at + p.length);
      at += p.length;
    }
    EXPECT_EQ(at, row.used);
  }
  std::map<int64_t, std::vector<int32_t>> docs;
  for (auto& [index, parts] : pieces) {
    for (auto& [offset, tokens] : parts) {
      EXPECT_EQ(offset, static_cast<int64_t>(docs[index].size())) << "document " << index;
      docs[index].insert(docs[index].end(), tokens.begin(), tokens.end());
    }
  }
  return docs;
}

void ExpectUnpacksTo(const std::vector<PackedRow>& rows,
                     const std::vector<std::vector<int32_t>>& docs, int64_t length) {
  for (const PackedRow& row : rows) {
    ASSERT_EQ(static_cast<int64_t>(row.tokens.size()), length);
    for (size_t i = static_cast<size_t>(row.used); i < row.tokens.size(); ++i) {
      EXPECT_EQ(row.tokens[i], -1) << "padding";
    }
  }
  const auto unpacked = Unpack(rows);
  size_t non_empty = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (docs[d].empty()) continue;
    ++non_empty;
    ASSERT_TRUE(unpacked.count(static_cast<int64_t>(d))) << "document " << d;
    EXPECT_EQ(unpacked.at(static_cast<int64_t>(d)), docs[d]) << "document " << d;
  }
  EXPECT_EQ(unpacked.size(), non_empty);
}

SequencePackOptions Options(int64_t length, PackMode mode, int64_t window = 1 << 20) {
  SequencePackOptions o;
  o.length = length;
  o.mode = mode;
  o.window_tokens = window;
  o.pad_id = -1;
  return o;
}

TEST(SequencePack, GreedyCutsTheStreamEveryLengthTokens) {
  const auto docs = Documents({3, 7, 0, 12, 1});
  const auto rows = Pack(Options(5, PackMode::kGreedy), docs);
  ASSERT_EQ(rows.size(), 5u);  // 23 tokens: four full rows and one of 3
  for (size_t r = 0; r + 1 < rows.size(); ++r) EXPECT_EQ(rows[r].used, 5);
  EXPECT_EQ(rows.back().used, 3);
  // Row 0: document 0 whole, then document 1's first two tokens.
  EXPECT_THAT(rows[0].tokens, ElementsAre(1000, 1001, 1002, 2000, 2001));
  ASSERT_EQ(rows[0].pieces.size(), 2u);
  EXPECT_EQ(rows[0].pieces[1].index, 1);
  EXPECT_EQ(rows[1].pieces[0].offset, 2);  // document 1 goes on
  EXPECT_EQ(rows[0].next, (PackPoint{1, 2, 0}));
  ExpectUnpacksTo(rows, docs, 5);
}

TEST(SequencePack, BestFitPlacesEachPieceInTheFullestRowThatHoldsIt) {
  const auto docs = Documents({6, 5, 4, 3, 2});
  const auto rows = Pack(Options(10, PackMode::kBestFit), docs);
  ASSERT_EQ(rows.size(), 2u);
  std::vector<std::vector<int64_t>> placed;
  for (const PackedRow& row : rows) {
    placed.emplace_back();
    for (const PackedPiece& p : row.pieces) placed.back().push_back(p.index);
  }
  // 6 opens row 0, 5 row 1; 4 fills row 0 exactly; 3 and 2 go to row 1.
  EXPECT_THAT(placed, ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3, 4)));
  EXPECT_EQ(rows[0].used, 10);
  EXPECT_EQ(rows[1].used, 10);
  ExpectUnpacksTo(rows, docs, 10);
}

TEST(SequencePack, BestFitKeepsDocumentsThatFitWholeAndCutsLongerOnes) {
  std::mt19937 gen(7);
  std::vector<int> lengths;
  for (int i = 0; i < 300; ++i) lengths.push_back(std::uniform_int_distribution<int>(0, 90)(gen));
  lengths[17] = 250;  // longer than a row
  const auto docs = Documents(lengths);
  const auto rows = Pack(Options(64, PackMode::kBestFit, 2000), docs);
  std::map<int64_t, int> pieces;
  for (const PackedRow& row : rows) {
    for (const PackedPiece& p : row.pieces) ++pieces[p.index];
  }
  for (size_t d = 0; d < docs.size(); ++d) {
    const int64_t n = static_cast<int64_t>(docs[d].size());
    if (n > 0) {
      EXPECT_EQ(pieces[int64_t(d)], (n + 63) / 64) << "document " << d;
    }
  }
  ExpectUnpacksTo(rows, docs, 64);
  // Fewer padding tokens than one row's worth per window, on average.
  int64_t padding = 0;
  for (const PackedRow& row : rows) padding += 64 - row.used;
  EXPECT_LT(padding, static_cast<int64_t>(rows.size()) * 64 / 4);
}

TEST(SequencePack, GreedyUnpacksRandomDocumentsExactly) {
  std::mt19937 gen(3);
  std::vector<int> lengths;
  for (int i = 0; i < 500; ++i) lengths.push_back(std::uniform_int_distribution<int>(0, 300)(gen));
  const auto docs = Documents(lengths);
  const auto rows = Pack(Options(128, PackMode::kGreedy), docs);
  ExpectUnpacksTo(rows, docs, 128);
  for (size_t r = 0; r + 1 < rows.size(); ++r) EXPECT_EQ(rows[r].used, 128);
}

// Every row's `next`, fed the documents from its position, makes the rows
// that followed it.
void ExpectResumesAtEveryRow(const SequencePackOptions& options,
                             const std::vector<std::vector<int32_t>>& docs) {
  const auto rows = Pack(options, docs);
  ASSERT_GT(rows.size(), 3u);
  for (size_t k = 0; k + 1 < rows.size(); ++k) {
    const auto rest = Pack(options, docs, rows[k].next);
    ASSERT_EQ(rest.size(), rows.size() - k - 1) << "after row " << k;
    for (size_t r = 0; r < rest.size(); ++r) {
      EXPECT_EQ(rest[r].tokens, rows[k + 1 + r].tokens) << "after row " << k << ", row " << r;
      EXPECT_EQ(rest[r].next, rows[k + 1 + r].next);
    }
  }
}

TEST(SequencePack, ResumesMidSequenceAtAnyRow) {
  std::mt19937 gen(11);
  std::vector<int> lengths;
  for (int i = 0; i < 120; ++i) lengths.push_back(std::uniform_int_distribution<int>(0, 70)(gen));
  const auto docs = Documents(lengths);
  ExpectResumesAtEveryRow(Options(32, PackMode::kGreedy), docs);
  ExpectResumesAtEveryRow(Options(32, PackMode::kBestFit, 300), docs);
}

TEST(SequencePack, ParsesItsModes) {
  EXPECT_EQ(*ParsePackMode("best_fit"), PackMode::kBestFit);
  EXPECT_EQ(*ParsePackMode("greedy"), PackMode::kGreedy);
  EXPECT_THAT(std::string(ParsePackMode("bestfit").status().message()),
              HasSubstr("'bestfit' is not greedy or best_fit"));
}

}  // namespace
}  // namespace prepflow
