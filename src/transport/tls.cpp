#include "transport/tls.h"

#include "transport/socket.h"
#include "transport/socket_detail.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>

namespace skippy::transport {
namespace {

// OpenSSL's reasons for the last failure on this thread (its error queue), emptied.
// *certificate_refused (if given) is set when one of them is the peer's alert that it
// refused our certificate.
std::string take_openssl_error(bool * certificate_refused = nullptr) {
    std::string out;
    while (unsigned long e = ERR_get_error()) {
        switch (ERR_GET_REASON(e)) {
            case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
            case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
            case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
            case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
            case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
            case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
            case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
            case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
                if (certificate_refused) *certificate_refused = true;
                break;
            default: break;
        }
        char buf[256];
        ERR_error_string_n(e, buf, sizeof(buf));
        // "error:0A000086:SSL routines::certificate verify failed" → the reason after the last ':'.
        const char * reason = std::strrchr(buf, ':');
        if (!out.empty()) out += "; ";
        out += reason && reason[1] ? reason + 1 : buf;
    }
    return out.empty() ? "unknown TLS error" : out;
}

// The peer refused our certificate (its CA is not the peer's): as permanent as a
// certificate of ours the peer does not trust.
status certificate_refused_error(const std::string & reason) {
    return make_error(error_code::permission, "TLS: the peer refused our certificate (" + reason + ")");
}

status bad_file(const std::string & what, const std::string & path) {
    ERR_clear_error();
    return make_error(error_code::invalid_argument, "--stage-tls: " + what + " " + path);
}

// Waits on the socket for what OpenSSL asked for. false when the deadline passed.
bool wait_for(int fd, int ssl_error, clock::time_point deadline) {
    if (clock::now() >= deadline) return false;
    pollfd p{fd, static_cast<short>(ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
    const int rc = ::poll(&p, 1, std::min(detail::poll_timeout_ms(deadline), 1000) + 1);
    return rc != 0 || clock::now() < deadline;
}

}  // namespace

result<tls_files> parse_tls_files(const std::string & text) {
    tls_files f;
    std::string * parts[3] = {&f.cert_path, &f.key_path, &f.ca_path};
    size_t start = 0;
    for (int i = 0; i < 3; ++i) {
        const size_t comma = text.find(',', start);
        const bool last = i == 2;
        if (last != (comma == std::string::npos)) {
            return make_error(error_code::invalid_argument, "--stage-tls takes CERT,KEY,CA: three comma-separated PEM files");
        }
        *parts[i] = text.substr(start, last ? std::string::npos : comma - start);
        if (parts[i]->empty()) {
            return make_error(error_code::invalid_argument, "--stage-tls takes CERT,KEY,CA: part " + std::to_string(i + 1) + " is empty");
        }
        start = comma + 1;
    }
    return f;
}

result<std::shared_ptr<const tls_context>> tls_context::load(const tls_files & files) {
    ERR_clear_error();
    SSL_CTX * ctx = SSL_CTX_new(TLS_method());
    if (!ctx) return make_error(error_code::internal, "cannot create a TLS context: " + take_openssl_error());
    std::shared_ptr<tls_context> out(new tls_context());
    out->ctx_ = ctx;
    out->files_ = files;
    // Both ends are ours: TLS 1.3 only, both certificates required, nothing resumed.
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ctx, 0);  // no post-handshake tickets arriving between frames
    // A peer that dies without close_notify reads as a closed peer, as on a plain link.
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // One record per read from the socket: see tcp_socket::start_tls's promise.
    SSL_CTX_set_read_ahead(ctx, 0);
    if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_path.c_str()) != 1) {
        return bad_file("cannot read a PEM certificate from", files.cert_path);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, files.key_path.c_str(), SSL_FILETYPE_PEM) != 1) {
        return bad_file("cannot read a PEM private key from", files.key_path);
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        return bad_file("the private key does not match the certificate " + files.cert_path + ":", files.key_path);
    }
    if (SSL_CTX_load_verify_locations(ctx, files.ca_path.c_str(), nullptr) != 1) {
        return bad_file("cannot read CA certificates from", files.ca_path);
    }
    // The CA list sent in the CertificateRequest: the client picks no other certificate.
    STACK_OF(X509_NAME) * names = SSL_load_client_CA_file(files.ca_path.c_str());
    if (!names) return bad_file("no CA certificate in", files.ca_path);
    SSL_CTX_set_client_CA_list(ctx, names);
    ERR_clear_error();
    return std::shared_ptr<const tls_context>(std::move(out));
}

tls_context::~tls_context() { SSL_CTX_free(static_cast<SSL_CTX *>(ctx_)); }

// One socket's TLS connection. OpenSSL allows one call on an SSL at a time, while the
// links read on one thread and write on another: every SSL_* call holds `mutex`, and
// waiting for the socket happens outside it.
struct tcp_socket::tls_session {
    SSL *      ssl = nullptr;
    std::mutex mutex;
};

void tcp_socket::tls_session_deleter::operator()(tls_session * s) const {
    if (!s) return;
    SSL_free(s->ssl);
    delete s;
}

status tcp_socket::start_tls(const tls_context & context, tls_role role, clock::time_point deadline) {
    // OpenSSL reads and writes the fd itself, without MSG_DONTWAIT: it must not block.
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    ERR_clear_error();
    std::unique_ptr<tls_session, tls_session_deleter> session(new tls_session());
    session->ssl = SSL_new(static_cast<SSL_CTX *>(context.native()));
    if (!session->ssl || SSL_set_fd(session->ssl, fd_) != 1) {
        return make_error(error_code::internal, "cannot start TLS: " + take_openssl_error());
    }
    if (role == tls_role::client) {
        SSL_set_connect_state(session->ssl);
    } else {
        SSL_set_accept_state(session->ssl);
    }
    while (true) {
        ERR_clear_error();
        errno = 0;
        const int rc = SSL_do_handshake(session->ssl);
        if (rc == 1) break;
        const int err = SSL_get_error(session->ssl, rc);
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
            if (!wait_for(fd_, err, deadline)) return make_error(error_code::timed_out, "TLS handshake timed out");
            continue;
        }
        const long verify = SSL_get_verify_result(session->ssl);
        if (verify != X509_V_OK) {
            ERR_clear_error();
            return make_error(error_code::permission,
                              std::string("TLS: the peer's certificate is not trusted: ") + X509_verify_cert_error_string(verify));
        }
        // Most often the peer speaks plain TCP: it closes or resets on our first record.
        constexpr const char * hint = " (does the peer run with --stage-tls?)";
        if (err == SSL_ERROR_SYSCALL && errno != 0) {
            return make_error(error_code::unavailable, std::string("TLS handshake failed: ") + std::strerror(errno) + hint);
        }
        if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
            return make_error(error_code::unavailable, std::string("TLS handshake failed: the peer closed the connection") + hint);
        }
        bool refused = false;
        const std::string reason = take_openssl_error(&refused);
        if (refused) return certificate_refused_error(reason);
        return make_error(error_code::unavailable, "TLS handshake failed: " + reason + hint);
    }
    tls_ = std::move(session);
    return status::ok();
}

status tcp_socket::tls_write_all(std::span<const uint8_t> data, clock::time_point deadline) {
    size_t done = 0;
    while (done < data.size()) {
        int rc = 0;
        int err = SSL_ERROR_NONE;
        std::string reason;
        {
            std::lock_guard<std::mutex> lock(tls_->mutex);
            ERR_clear_error();
            errno = 0;
            const int n = static_cast<int>(std::min<size_t>(data.size() - done, INT_MAX));
            rc = SSL_write(tls_->ssl, data.data() + done, n);
            if (rc <= 0) {
                err = SSL_get_error(tls_->ssl, rc);
                if (err == SSL_ERROR_SSL) reason = take_openssl_error();
            }
        }
        if (rc > 0) {
            done += static_cast<size_t>(rc);
            continue;
        }
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
            if (!wait_for(fd_, err, deadline)) {
                return make_error(error_code::timed_out, "send timed out: the peer took " + std::to_string(done) + " of " +
                                                             std::to_string(data.size()) + " bytes");
            }
            continue;
        }
        if (err == SSL_ERROR_SYSCALL && errno != 0) {
            const status failed = detail::sys_error("TLS send failed");
            // A TLS 1.3 client's handshake ends before the server has checked its
            // certificate; a server that refused it sent an alert and closed, and the
            // reset can reach our first write before we read the alert. Read it.
            std::lock_guard<std::mutex> lock(tls_->mutex);
            ERR_clear_error();
            uint8_t byte = 0;
            if (SSL_read(tls_->ssl, &byte, 1) <= 0) {
                bool refused = false;
                const std::string alert = take_openssl_error(&refused);
                if (refused) return certificate_refused_error(alert);
            }
            return failed;
        }
        if (!reason.empty()) return make_error(error_code::unavailable, "TLS send failed: " + reason);
        return make_error(error_code::unavailable, "send failed: the connection is closed");
    }
    return status::ok();
}

status tcp_socket::tls_read_exact(std::span<uint8_t> out, clock::time_point deadline, size_t * n_read) {
    size_t done = 0;
    auto finish = [&](status st) {
        if (n_read) *n_read = done;
        return st;
    };
    while (done < out.size()) {
        int rc = 0;
        int err = SSL_ERROR_NONE;
        std::string reason;
        bool refused = false;
        {
            std::lock_guard<std::mutex> lock(tls_->mutex);
            ERR_clear_error();
            errno = 0;
            const int n = static_cast<int>(std::min<size_t>(out.size() - done, INT_MAX));
            rc = SSL_read(tls_->ssl, out.data() + done, n);
            if (rc <= 0) {
                err = SSL_get_error(tls_->ssl, rc);
                if (err == SSL_ERROR_SSL) reason = take_openssl_error(&refused);
            }
        }
        if (rc > 0) {
            done += static_cast<size_t>(rc);
            continue;
        }
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
            if (!wait_for(fd_, err, deadline)) return finish(make_error(error_code::timed_out, "timed out waiting for the peer"));
            continue;
        }
        if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && errno == 0)) {
            return finish(detail::closed_by_peer(done, out.size()));
        }
        if (err == SSL_ERROR_SYSCALL) return finish(detail::sys_error("TLS recv failed"));
        // In TLS 1.3 a client learns only here that the server refused its certificate.
        if (refused) return finish(certificate_refused_error(reason));
        // A record that fails its AEAD tag (altered or injected bytes), or another alert.
        return finish(make_error(error_code::unavailable, "TLS recv failed: " + reason));
    }
    return finish(status::ok());
}

}  // namespace skippy::transport
