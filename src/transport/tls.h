// TLS for stage links that cross networks we do not trust (`--stage-tls CERT,KEY,CA`,
// docs/transport.md "TLS"). Both ends present a certificate and verify the other's
// against the same CA (mutual TLS 1.3); the CA is the trust root, so any certificate it
// signed is a stage of this deployment (host names are not checked: stages are
// addressed by the topology, often by IP). TLS runs under the stage protocol: the
// hello, the key proofs and the frame MACs (link_auth.h) travel inside it unchanged.
#pragma once

#include "base/status.h"

#include <memory>
#include <string>

namespace skippy::transport {

struct tls_files {
    std::string cert_path;  // PEM: this stage's certificate (optionally followed by intermediates)
    std::string key_path;   // PEM: its private key
    std::string ca_path;    // PEM: the CA(s) a peer's certificate must chain to
};

// "CERT,KEY,CA" → the three paths. invalid_argument unless there are exactly three
// non-empty parts.
result<tls_files> parse_tls_files(const std::string & text);

// A loaded certificate, key and CA, shared by every link of a process (immutable once
// loaded; safe to use from many threads).
class tls_context {
public:
    // Reads and checks the files: the key must match the certificate and the CA file
    // must hold at least one certificate. invalid_argument naming the file otherwise
    // (never printing key material).
    static result<std::shared_ptr<const tls_context>> load(const tls_files & files);
    ~tls_context();
    tls_context(const tls_context &) = delete;
    tls_context & operator=(const tls_context &) = delete;

    // The SSL_CTX, for tcp_socket::start_tls.
    void * native() const { return ctx_; }
    const tls_files & files() const { return files_; }

private:
    tls_context() = default;
    void *    ctx_ = nullptr;  // SSL_CTX
    tls_files files_;
};

}  // namespace skippy::transport
