// Token data for the next-token task (model.kind = "transformer"):
//
//   sort  minGPT's sorting task: `length` digits drawn from [0, digits) and then the same digits
//         sorted; a sample is that sequence but its last token (2 length - 1 ids), and its targets
//         the sequence shifted by one with the first length - 1 targets ignored (-1): the model is
//         scored on producing the sorted half only. Sequences go to the test set when a hash of
//         their digits says so (a quarter of them), so no test sequence is ever trained on.
//   text  character-level language modelling on a UTF-8 file: the vocabulary is the file's
//         distinct characters (Unicode code points) in code-point order; the first 90% of the
//         characters train (a sample at every position: `seq_len` characters, its targets the
//         next ones), the last 10% test (samples side by side, not overlapping).
//
// Ids are int64; a target of -1 is not scored. Errors (a missing file, bytes that are not UTF-8,
// a text too short for its samples) are rv::InputError naming the file and, for bad bytes, their
// offset.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rv {

struct TokenSet {
  at::Tensor train_x, train_y, test_x, test_y;  // int64 [samples, tokens]
};

// The sorting task's samples: `train` and `test` of them, drawn from `seed`.
TokenSet make_sort(int64_t length, int64_t digits, int64_t train, int64_t test, uint64_t seed);

// A UTF-8 file as ids into its own vocabulary.
struct TextCorpus {
  std::vector<int64_t> ids;       // one per character
  std::vector<char32_t> symbols;  // the vocabulary: id -> code point, ascending
};
TextCorpus read_text(const std::string& path);

// The text task's samples of `seq_len` characters (train and test as above; the train samples
// are views into one stream of ids, not copies).
TokenSet make_text(const TextCorpus& corpus, int64_t seq_len, const std::string& path);

}  // namespace rv
