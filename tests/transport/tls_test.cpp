// Stage links over TLS (transport/tls.h): mutual certificates of one CA, the stage
// protocol unchanged inside, and nothing readable or alterable on the wire.
#include "fault_proxy.h"
#include "link_test_util.h"
#include "tls_test_certs.h"
#include "transport/link.h"
#include "transport/tls.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace skippy::transport {
namespace {

using test_util::accept_all;
using test_util::acceptor;
using test_util::k_key;
using test_util::listener_fixture;
using test_util::options_with_key;
using test_util::stop_request;
using test_util::test_pki;

std::shared_ptr<const tls_context> load_or_fail(const tls_files & files) {
    auto ctx = tls_context::load(files);
    EXPECT_TRUE(ctx.is_ok()) << ctx.error().to_string();
    return ctx.is_ok() ? *ctx : nullptr;
}

link_options tls_options(const std::shared_ptr<const tls_context> & tls, const std::string & key = "") {
    link_options o = options_with_key(key);
    o.tls = tls;
    return o;
}

template <typename Needle>
bool contains(const std::vector<uint8_t> & bytes, const Needle & needle) {
    return std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end(),
                       [](uint8_t a, auto b) { return a == static_cast<uint8_t>(b); }) != bytes.end();
}

TEST(tls, FlagTakesThreeCommaSeparatedFiles) {
    auto f = parse_tls_files("a.crt,a.key,ca.pem");
    ASSERT_TRUE(f.is_ok()) << f.error().to_string();
    EXPECT_EQ(f->cert_path, "a.crt");
    EXPECT_EQ(f->key_path, "a.key");
    EXPECT_EQ(f->ca_path, "ca.pem");
    for (const char * bad : {"", "a.crt", "a.crt,a.key", "a.crt,a.key,ca.pem,x", "a.crt,,ca.pem", ",a.key,ca.pem", "a.crt,a.key,"}) {
        auto r = parse_tls_files(bad);
        ASSERT_FALSE(r.is_ok()) << "accepted '" << bad << "'";
        EXPECT_EQ(r.error().code(), error_code::invalid_argument);
        EXPECT_NE(r.error().message().find("CERT,KEY,CA"), std::string::npos) << r.error().to_string();
    }
}

TEST(tls, LoadRefusesMissingFilesAndAKeyOfAnotherCertificate) {
    test_pki pki;
    EXPECT_NE(load_or_fail(pki.files("stage-a")), nullptr);
    struct bad_case {
        tls_files   files;
        std::string names;  // the file the message must name
    };
    const tls_files a = pki.files("stage-a");
    const tls_files b = pki.files("stage-b");
    const bad_case cases[] = {
        {{pki.path("missing.crt"), a.key_path, a.ca_path}, "missing.crt"},
        {{a.cert_path, pki.path("missing.key"), a.ca_path}, "missing.key"},
        {{a.cert_path, b.key_path, a.ca_path}, b.key_path},      // b's key with a's certificate
        {{a.cert_path, a.key_path, pki.path("nope.pem")}, "nope.pem"},
        {{a.key_path, a.key_path, a.ca_path}, a.key_path},       // a key where the certificate goes
        {{a.cert_path, a.key_path, a.key_path}, a.key_path},     // no CA certificate in the CA file
    };
    for (const bad_case & c : cases) {
        auto ctx = tls_context::load(c.files);
        ASSERT_FALSE(ctx.is_ok()) << "accepted " << c.files.cert_path << "," << c.files.key_path << "," << c.files.ca_path;
        EXPECT_EQ(ctx.error().code(), error_code::invalid_argument);
        EXPECT_NE(ctx.error().message().find(c.names), std::string::npos) << ctx.error().to_string();
        EXPECT_EQ(ctx.error().message().find("PRIVATE KEY"), std::string::npos) << "never prints key material";
    }
}

TEST(tls, MutualTlsCarriesFramesBothWaysAndKeepsReadinessExact) {
    test_pki pki;
    auto server_tls = load_or_fail(pki.files("stage-a"));
    auto client_tls = load_or_fail(pki.files("stage-b"));
    listener_fixture f;
    acceptor a(f.listener, tls_options(server_tls), accept_all);
    protocol::hello h;
    h.lane = 2;
    auto link = connect_link(f.ep, h, tls_options(client_tls), "stage 1");
    a.thread.join();
    ASSERT_TRUE(link.is_ok()) << link.error().to_string();
    ASSERT_TRUE(a.outcome.is_ok()) << a.outcome.error().to_string();
    EXPECT_EQ(a.outcome->hello.lane, 2u);
    EXPECT_TRUE(a.socket.tls_on());
    stage_link server(std::move(a.socket), tls_options(server_tls), "stage 0");

    // Many frames back to back: each is read only after wait_readable said so, which
    // holds only if no frame's bytes wait inside TLS once the one before it is read.
    constexpr uint64_t n_frames = 300;
    for (uint64_t id = 1; id <= n_frames; ++id) ASSERT_TRUE(link->send_request(stop_request(id)).is_ok());
    for (uint64_t id = 1; id <= n_frames; ++id) {
        const int fd = server.fd();
        ASSERT_GE(wait_readable(std::span<const int>(&fd, 1), clock::now() + std::chrono::seconds(2)), 0) << "frame " << id;
        auto got = server.read_request(server.frame_deadline());
        ASSERT_TRUE(got.is_ok()) << got.error().to_string();
        EXPECT_EQ(got->request_id, id);
    }
    const int fd = server.fd();
    EXPECT_LT(wait_readable(std::span<const int>(&fd, 1), clock::now() + std::chrono::milliseconds(50)), 0) << "nothing left";

    server.fail(7, make_error(error_code::runtime, "out of KV blocks"));
    auto reply = link->read_reply(clock::now() + std::chrono::seconds(2));
    ASSERT_TRUE(reply.is_ok()) << reply.error().to_string();
    EXPECT_EQ(protocol::error_reply_status(*reply).code(), error_code::runtime);
    auto after = link->read_reply(clock::now() + std::chrono::seconds(2));
    ASSERT_FALSE(after.is_ok());
    EXPECT_TRUE(link->peer_closed()) << "a close over TLS is a closed peer, as on plain TCP: " << after.error().to_string();
}

TEST(tls, ReadsAndWritesOnTwoThreadsAtOnce) {
    test_pki pki;
    auto tls = load_or_fail(pki.files("stage-a"));
    listener_fixture f;
    acceptor a(f.listener, tls_options(tls), accept_all);
    auto link = connect_link(f.ep, protocol::hello{}, tls_options(tls), "stage 1");
    a.thread.join();
    ASSERT_TRUE(link.is_ok()) << link.error().to_string();
    ASSERT_TRUE(a.outcome.is_ok()) << a.outcome.error().to_string();
    stage_link server(std::move(a.socket), tls_options(tls), "stage 0");
    // Each side writes on one thread while it reads on another (as lanes do).
    constexpr uint64_t n_frames = 500;
    std::thread server_writer([&] {
        for (uint64_t id = 1; id <= n_frames; ++id) ASSERT_TRUE(server.send_request(stop_request(id)).is_ok());
    });
    std::thread client_writer([&] {
        for (uint64_t id = 1; id <= n_frames; ++id) ASSERT_TRUE(link->send_request(stop_request(1000 + id)).is_ok());
    });
    std::thread client_reader([&] {
        for (uint64_t id = 1; id <= n_frames; ++id) {
            auto got = link->read_request(clock::now() + std::chrono::seconds(5));
            ASSERT_TRUE(got.is_ok()) << got.error().to_string();
            ASSERT_EQ(got->request_id, id);
        }
    });
    for (uint64_t id = 1; id <= n_frames; ++id) {
        auto got = server.read_request(clock::now() + std::chrono::seconds(5));
        ASSERT_TRUE(got.is_ok()) << got.error().to_string();
        ASSERT_EQ(got->request_id, 1000 + id);
    }
    server_writer.join();
    client_writer.join();
    client_reader.join();
}

TEST(tls, APeerWithACertificateOfAnotherCaIsRefusedOnBothSides) {
    test_pki pki;
    auto stage_tls = load_or_fail(pki.files("stage-a"));
    // A stranger with its own CA: the stage does not trust its certificate, and it does
    // not trust the stage's.
    auto stranger_tls = load_or_fail(pki.files("stranger", "other-ca.pem"));
    // A stranger that trusts our CA but shows a certificate of another one.
    auto half_stranger_tls = load_or_fail(pki.files("stranger", "ca.pem"));
    for (const auto & dialer_tls : {stranger_tls, half_stranger_tls}) {
        listener_fixture f;
        bool asked = false;
        acceptor a(f.listener, tls_options(stage_tls), [&](const protocol::hello &) {
            asked = true;
            return status::ok();
        });
        auto link = connect_link(f.ep, protocol::hello{}, tls_options(dialer_tls), "stage 1");
        a.thread.join();
        // Whoever verifies first refuses with "not trusted"; the other end learns it from
        // the alert ("refused our certificate"). Both are permission errors.
        ASSERT_FALSE(a.outcome.is_ok()) << "the stage accepted a certificate its CA did not sign";
        EXPECT_EQ(a.outcome.error().code(), error_code::permission) << a.outcome.error().to_string();
        EXPECT_FALSE(asked) << "nothing is decided for a peer TLS refused";
        ASSERT_FALSE(link.is_ok());
        EXPECT_EQ(link.error().code(), error_code::permission) << link.error().to_string();
        const bool stage_verified = dialer_tls == half_stranger_tls;
        EXPECT_NE(a.outcome.error().message().find(stage_verified ? "not trusted" : "refused our certificate"), std::string::npos)
            << a.outcome.error().to_string();
        EXPECT_NE(link.error().message().find(stage_verified ? "refused our certificate" : "not trusted"), std::string::npos)
            << link.error().to_string();
    }
}

TEST(tls, TlsOnOneSideOnlyFailsTheHandshakeOnBoth) {
    test_pki pki;
    auto tls = load_or_fail(pki.files("stage-a"));
    for (bool listener_tls : {true, false}) {
        listener_fixture f;
        acceptor a(f.listener, listener_tls ? tls_options(tls) : options_with_key(""), accept_all);
        const auto t0 = clock::now();
        auto link = connect_link(f.ep, protocol::hello{}, listener_tls ? options_with_key("") : tls_options(tls), "stage 1");
        a.thread.join();
        EXPECT_LT(clock::now() - t0, std::chrono::seconds(5)) << "bounded by the handshake timeout";
        EXPECT_FALSE(link.is_ok()) << "listener tls " << listener_tls;
        EXPECT_FALSE(a.outcome.is_ok()) << "listener tls " << listener_tls;
        if (!listener_tls && !link.is_ok()) {
            EXPECT_NE(link.error().message().find("--stage-tls"), std::string::npos) << link.error().to_string();
        }
    }
}

TEST(tls, WireBytesAreEncryptedAndAnAlteredRecordFailsTheLink) {
    test_pki pki;
    auto tls = load_or_fail(pki.files("stage-a"));
    for (bool corrupt : {false, true}) {
        listener_fixture f;
        testing::fault_proxy proxy(f.ep);
        acceptor a(f.listener, tls_options(tls, k_key), accept_all);
        auto link = connect_link(proxy.address(), protocol::hello{}, tls_options(tls, k_key), "stage 1");
        a.thread.join();
        ASSERT_TRUE(link.is_ok()) << link.error().to_string();
        ASSERT_TRUE(a.outcome.is_ok()) << a.outcome.error().to_string();
        EXPECT_TRUE(link->authenticated()) << "the stage key's proofs and MACs run inside TLS";
        stage_link server(std::move(a.socket), tls_options(tls, k_key), "stage 0", std::move(a.outcome->macs));
        const size_t handshake_bytes = proxy.recorded().size();
        if (corrupt) proxy.corrupt_at(static_cast<int64_t>(handshake_bytes) + 20);  // inside the next record
        const protocol::request r = stop_request(0x1122334455667788ull);
        ASSERT_TRUE(link->send_request(r).is_ok());
        auto got = server.read_request(clock::now() + std::chrono::seconds(2));
        if (corrupt) {
            ASSERT_FALSE(got.is_ok()) << "an altered TLS record was delivered";
            EXPECT_NE(got.error().message().find("TLS"), std::string::npos) << got.error().to_string();
            continue;
        }
        ASSERT_TRUE(got.is_ok()) << got.error().to_string();
        EXPECT_EQ(got->request_id, r.request_id);
        const std::vector<uint8_t> wire = proxy.recorded();
        ASSERT_GT(wire.size(), handshake_bytes);
        EXPECT_EQ(wire[0], 0x16) << "the dialer starts with a TLS handshake record";
        EXPECT_FALSE(contains(wire, std::string_view("SKPY"))) << "the hello travels inside TLS";
        EXPECT_FALSE(contains(wire, protocol::encode_request(r))) << "frames travel inside TLS";
    }
}

}  // namespace
}  // namespace skippy::transport
