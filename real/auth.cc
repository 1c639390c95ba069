#include "real/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace rv::auth {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1)
    throw Error("OpenSSL gave no random bytes (RAND_bytes failed)");
  return out;
}

std::string new_secret() {
  // Text (hex), so that the file that carries it reads the same with or without a final newline.
  static const char* kHex = "0123456789abcdef";
  const std::string raw = random_bytes(32);
  std::string out;
  for (const char c : raw) {
    out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xF];
    out += kHex[static_cast<unsigned char>(c) & 0xF];
  }
  return out;
}

void write_secret_file(const std::string& path, const std::string& secret) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error("cannot create the run's secret file " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < secret.size()) {
    const ssize_t w = ::write(fd, secret.data() + done, secret.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(path.c_str());
      throw Error("cannot write the run's secret file " + path + ": " + why);
    }
    done += static_cast<size_t>(w);
  }
  ::close(fd);
}

namespace {

std::string checked(std::string secret, const std::string& what) {
  if (secret.size() < kMinSecretBytes)
    throw InputError(what + " holds " + std::to_string(secret.size()) +
                     " bytes; a run secret needs at least " + std::to_string(kMinSecretBytes));
  if (secret.size() > kMaxSecretBytes)
    throw InputError(what + " holds more than " + std::to_string(kMaxSecretBytes) + " bytes");
  return secret;
}

}  // namespace

bool secret_in_environment() {
  for (const char* name : {kSecretFileEnv, kSecretEnv})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return true;
  return false;
}

std::string secret_from_environment() {
  if (const char* file = std::getenv(kSecretFileEnv); file != nullptr && *file != '\0') {
    const std::string what = std::string(kSecretFileEnv) + "=" + file;
    const int fd = ::open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(what + ": cannot read it: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw InputError(what + ": not a regular file");
    }
    if (st.st_uid != ::geteuid()) {
      ::close(fd);
      throw InputError(what + ": owned by another user (uid " + std::to_string(st.st_uid) + ")");
    }
    if ((st.st_mode & 077) != 0) {
      ::close(fd);
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      throw InputError(what + ": other users may read it (mode " + mode +
                       "); make it private: chmod 600 " + file);
    }
    if (st.st_size > static_cast<off_t>(kMaxSecretBytes)) {
      ::close(fd);
      throw InputError(what + " holds more than " + std::to_string(kMaxSecretBytes) + " bytes");
    }
    std::string secret(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < secret.size()) {
      const ssize_t r = ::read(fd, secret.data() + done, secret.size() - done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      done += static_cast<size_t>(r);
    }
    ::close(fd);
    secret.resize(done);
    // A final line ending (what echo or an editor leaves) is not part of the secret, so the file
    // and RAVNEST_SECRET holding the same text agree.
    if (!secret.empty() && secret.back() == '\n') secret.pop_back();
    if (!secret.empty() && secret.back() == '\r') secret.pop_back();
    return checked(std::move(secret), what);
  }
  if (const char* v = std::getenv(kSecretEnv); v != nullptr && *v != '\0')
    return checked(v, kSecretEnv);
  throw InputError(
      std::string("no run secret: ranks started by hand authenticate each other with a secret that "
                  "every rank of the run shares; set ") +
      kSecretFileEnv +
      " to a file that only you can read (for example: head -c 32 /dev/urandom | base64 "
      "> secret; chmod 600 secret), or " +
      kSecretEnv + " to at least " + std::to_string(kMinSecretBytes) + " characters");
}

Mac mac(const std::string& secret, std::initializer_list<std::string_view> parts) {
  EVP_MAC* m = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (m == nullptr) throw Error("OpenSSL has no HMAC");
  EVP_MAC_CTX* c = EVP_MAC_CTX_new(m);
  EVP_MAC_free(m);
  if (c == nullptr) throw Error("OpenSSL cannot make an HMAC context");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                               OSSL_PARAM_construct_end()};
  Mac out{};
  size_t len = 0;
  bool ok = EVP_MAC_init(c, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                         params) == 1;
  for (std::string_view p : parts) {
    const std::string n = be32(static_cast<uint32_t>(p.size()));
    ok = ok && EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(n.data()), n.size()) == 1;
    ok = ok && EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  }
  ok = ok && EVP_MAC_final(c, out.data(), &len, out.size()) == 1 && len == out.size();
  EVP_MAC_CTX_free(c);
  if (!ok) throw Error("OpenSSL's HMAC-SHA256 failed");
  return out;
}

bool same_mac(const Mac& want, std::string_view given) {
  return given.size() == want.size() && CRYPTO_memcmp(want.data(), given.data(), want.size()) == 0;
}

std::string be32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

}  // namespace rv::auth
