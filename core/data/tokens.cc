#include "core/data/tokens.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include "core/error.h"
#include "core/seed.h"

namespace rv {
namespace {

// The test set's share of the sorting task's sequences: those whose hash is 0 mod 4.
constexpr uint64_t kTestOneIn = 4;
constexpr double kTextTrainShare = 0.9;

// Decodes one UTF-8 sequence at `p` (strict: no overlong forms, surrogates or code points past
// U+10FFFF); returns its length, or 0 if the bytes there are not UTF-8.
size_t decode_utf8(const unsigned char* p, const unsigned char* end, char32_t* out) {
  const unsigned char c = p[0];
  size_t n;
  char32_t cp, least;
  if (c < 0x80) {
    *out = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, least = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, least = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, least = 0x10000;
  } else {
    return 0;
  }
  if (static_cast<size_t>(end - p) < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  *out = cp;
  return n;
}

// The hash that sends a sequence of digits to the test set (0 mod kTestOneIn) or not.
uint64_t sequence_hash(const int64_t* digits, int64_t length) {
  uint64_t h = 0x9E3779B97F4A7C15ULL;
  for (int64_t i = 0; i < length; ++i) h = mix_seed(h, static_cast<uint64_t>(digits[i]));
  return h;
}

// Where there are few distinct sequences, whether each side of the split has one at all (else
// drawing for that side would never end): rv::InputError naming the keys if not.
void check_sort_split(int64_t length, int64_t digits) {
  if (std::pow(static_cast<double>(digits), static_cast<double>(length)) > 65536.0) return;
  std::vector<int64_t> seq(static_cast<size_t>(length), 0);
  bool test = false, train = false;
  for (;;) {
    (sequence_hash(seq.data(), length) % kTestOneIn == 0 ? test : train) = true;
    int64_t i = 0;
    while (i < length && ++seq[static_cast<size_t>(i)] == digits) seq[static_cast<size_t>(i++)] = 0;
    if (i == length) break;
  }
  if (!test || !train)
    throw InputError("data.length, data.digits: " + std::to_string(length) + " digits of " +
                     std::to_string(digits) +
                     " kinds make too few distinct sequences to split into a train and a test set "
                     "(none falls to the " +
                     (test ? "train" : "test") + " side); take more digits or kinds");
}

}  // namespace

TokenSet make_sort(int64_t length, int64_t digits, int64_t train, int64_t test, uint64_t seed) {
  RV_CHECK(length >= 1 && digits >= 2 && train >= 1 && test >= 1, "make_sort: bad sizes");
  const int64_t tokens = 2 * length - 1;
  TokenSet s;
  s.train_x = at::empty({train, tokens}, at::kLong);
  s.train_y = at::empty({train, tokens}, at::kLong);
  s.test_x = at::empty({test, tokens}, at::kLong);
  s.test_y = at::empty({test, tokens}, at::kLong);
  std::mt19937_64 rng(mix_seed(seed, 0x5047));
  std::uniform_int_distribution<int64_t> digit(0, digits - 1);
  check_sort_split(length, digits);
  int64_t n_train = 0, n_test = 0;
  std::vector<int64_t> seq(static_cast<size_t>(2 * length));
  while (n_train < train || n_test < test) {
    for (int64_t i = 0; i < length; ++i) seq[static_cast<size_t>(i)] = digit(rng);
    const bool to_test = sequence_hash(seq.data(), length) % kTestOneIn == 0;
    int64_t& n = to_test ? n_test : n_train;
    if (n >= (to_test ? test : train)) continue;
    std::copy(seq.begin(), seq.begin() + length, seq.begin() + length);
    std::sort(seq.begin() + length, seq.end());
    int64_t* x = (to_test ? s.test_x : s.train_x)[n].data_ptr<int64_t>();
    int64_t* y = (to_test ? s.test_y : s.train_y)[n].data_ptr<int64_t>();
    for (int64_t i = 0; i < tokens; ++i) {
      x[i] = seq[static_cast<size_t>(i)];
      y[i] = i < length - 1 ? -1 : seq[static_cast<size_t>(i + 1)];
    }
    ++n;
  }
  return s;
}

TextCorpus read_text(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw KeyError("data.path", "'" + path + "' is not a readable text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw KeyError("data.path", "cannot read the text file '" + path + "'");
  std::string bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw KeyError("data.path", "reading '" + path + "' failed: " + e.what());
  }
  if (in.bad()) throw KeyError("data.path", "reading '" + path + "' failed");
  if (bytes.empty()) throw KeyError("data.path", "'" + path + "' is empty");
  std::vector<char32_t> chars;
  chars.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* end = p + bytes.size();
  for (const unsigned char* at = p; at < end;) {
    char32_t cp = 0;
    const size_t n = decode_utf8(at, end, &cp);
    if (n == 0)
      throw KeyError("data.path",
                     "'" + path + "' is not UTF-8 text (byte " + std::to_string(at - p) + ")");
    chars.push_back(cp);
    at += n;
  }
  TextCorpus c;
  const std::set<char32_t> distinct(chars.begin(), chars.end());
  c.symbols.assign(distinct.begin(), distinct.end());
  c.ids.reserve(chars.size());
  for (char32_t ch : chars)
    c.ids.push_back(std::lower_bound(c.symbols.begin(), c.symbols.end(), ch) - c.symbols.begin());
  return c;
}

TokenSet make_text(const TextCorpus& corpus, int64_t seq_len, const std::string& path) {
  const auto n = static_cast<int64_t>(corpus.ids.size());
  const auto cut = static_cast<int64_t>(static_cast<double>(n) * kTextTrainShare);
  // Each side needs one sample: seq_len characters and the one after.
  if (cut < seq_len + 1 || n - cut < seq_len + 1)
    throw KeyError("data.path", "'" + path + "' has " + std::to_string(n) +
                                    " characters: too few for samples of " +
                                    std::to_string(seq_len) +
                                    " (data.seq_len) on both sides of its 90/10 train/test split");
  const at::Tensor stream = at::tensor(corpus.ids, at::kLong);
  TokenSet s;
  // Views into the stream (offsets into its storage): train sample i is ids [i, i + seq_len),
  // its targets one further, all before `cut`; test sample j starts at cut + j seq_len.
  const int64_t train_n = cut - seq_len;
  s.train_x = stream.as_strided({train_n, seq_len}, {1, 1}, 0);
  s.train_y = stream.as_strided({train_n, seq_len}, {1, 1}, 1);
  const int64_t test_n = (n - cut - 1) / seq_len;
  s.test_x = stream.as_strided({test_n, seq_len}, {seq_len, 1}, cut).contiguous();
  s.test_y = stream.as_strided({test_n, seq_len}, {seq_len, 1}, cut + 1).contiguous();
  return s;
}

}  // namespace rv
