// Test certificates for TLS stage links, made at run time with OpenSSL (nothing is
// committed): a CA, stage certificates it signed, and a second CA for a stranger.
#pragma once

#include "transport/tls.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace skippy::transport::test_util {

struct test_key_pair {
    EVP_PKEY * key = nullptr;
    X509 *     cert = nullptr;
    test_key_pair() = default;
    test_key_pair(const test_key_pair &) = delete;
    test_key_pair & operator=(const test_key_pair &) = delete;
    ~test_key_pair() {
        X509_free(cert);
        EVP_PKEY_free(key);
    }
};

inline void add_extension(X509 * cert, X509 * issuer, int nid, const char * value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION * ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext) {
        X509_add_ext(cert, ext, -1);
        X509_EXTENSION_free(ext);
    }
}

// A P-256 key and a certificate for `common_name`, signed by `issuer` (self-signed when
// null, then a CA). Valid from a minute ago for a day.
inline void make_key_pair(test_key_pair & out, const std::string & common_name, const test_key_pair * issuer, long serial) {
    out.key = EVP_EC_gen("P-256");
    out.cert = X509_new();
    X509_set_version(out.cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(out.cert), serial);
    X509_gmtime_adj(X509_getm_notBefore(out.cert), -60);
    X509_gmtime_adj(X509_getm_notAfter(out.cert), 24 * 3600);
    X509_set_pubkey(out.cert, out.key);
    X509_NAME * name = X509_get_subject_name(out.cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char *>(common_name.c_str()), -1, -1, 0);
    X509 * issuer_cert = issuer ? issuer->cert : out.cert;
    X509_set_issuer_name(out.cert, X509_get_subject_name(issuer_cert));
    if (issuer) {
        add_extension(out.cert, issuer_cert, NID_basic_constraints, "critical,CA:FALSE");
        add_extension(out.cert, issuer_cert, NID_key_usage, "critical,digitalSignature");
        add_extension(out.cert, issuer_cert, NID_ext_key_usage, "serverAuth,clientAuth");
    } else {
        add_extension(out.cert, issuer_cert, NID_basic_constraints, "critical,CA:TRUE");
        add_extension(out.cert, issuer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
    }
    add_extension(out.cert, issuer_cert, NID_subject_key_identifier, "hash");
    X509_sign(out.cert, issuer ? issuer->key : out.key, EVP_sha256());
}

inline bool write_pem(const std::string & path, X509 * cert, EVP_PKEY * key) {
    FILE * f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    const bool ok = cert ? PEM_write_X509(f, cert) == 1 : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    std::fclose(f);
    return ok;
}

// A directory of PEM files, removed with the object:
//   ca.pem; stage-a.{crt,key} and stage-b.{crt,key} signed by it;
//   other-ca.pem and stranger.{crt,key} signed by the other CA.
struct test_pki {
    std::filesystem::path dir;

    test_pki() {
        char tmpl[] = "/tmp/skippy-tls-XXXXXX";
        dir = ::mkdtemp(tmpl) ? std::filesystem::path(tmpl) : std::filesystem::path();
        test_key_pair ca, other_ca, a, b, stranger;
        make_key_pair(ca, "skippy test CA", nullptr, 1);
        make_key_pair(other_ca, "another CA", nullptr, 2);
        make_key_pair(a, "stage-a", &ca, 3);
        make_key_pair(b, "stage-b", &ca, 4);
        make_key_pair(stranger, "stranger", &other_ca, 5);
        write_pem(path("ca.pem"), ca.cert, nullptr);
        write_pem(path("other-ca.pem"), other_ca.cert, nullptr);
        for (auto [who, pair] : {std::pair<const char *, test_key_pair *>{"stage-a", &a}, {"stage-b", &b}, {"stranger", &stranger}}) {
            write_pem(path(std::string(who) + ".crt"), pair->cert, nullptr);
            write_pem(path(std::string(who) + ".key"), nullptr, pair->key);
        }
    }
    ~test_pki() {
        std::error_code ec;
        if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
    test_pki(const test_pki &) = delete;
    test_pki & operator=(const test_pki &) = delete;

    std::string path(const std::string & name) const { return (dir / name).string(); }
    // The files of stage `who` ("stage-a", "stage-b", "stranger") trusting `ca_file`.
    tls_files files(const std::string & who, const std::string & ca_file = "ca.pem") const {
        return {path(who + ".crt"), path(who + ".key"), path(ca_file)};
    }
    // "CERT,KEY,CA", as --stage-tls takes it.
    std::string flag(const std::string & who, const std::string & ca_file = "ca.pem") const {
        const tls_files f = files(who, ca_file);
        return f.cert_path + "," + f.key_path + "," + f.ca_path;
    }
};

}  // namespace skippy::transport::test_util
