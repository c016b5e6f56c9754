#include "rpc/test_certs.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cstdlib>
#include <iostream>

namespace pscluster {
namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::cerr << "test_certs: " << what << " failed\n";
    std::abort();  // a test fixture's bug, not an input error
  }
}

std::string ToPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  Require(PEM_write_bio_X509(bio, cert) == 1, "PEM_write_bio_X509");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  return pem;
}

std::string ToPem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  Require(PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1,
          "PEM_write_bio_PrivateKey");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  return pem;
}

X509* CertOf(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  Require(cert != nullptr, "PEM_read_bio_X509");
  return cert;
}

EVP_PKEY* KeyOf(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  Require(key != nullptr, "PEM_read_bio_PrivateKey");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  Require(ext != nullptr && X509_add_ext(cert, ext, -1) == 1, "X509_add_ext");
  X509_EXTENSION_free(ext);
}

// A certificate for `name`/`role`; self-signed when `ca` is null.
TestCert Make(const TestCert* ca, const std::string& name, const std::string& role) {
  static std::atomic<long> serial{1};
  EVP_PKEY* key = EVP_EC_gen("P-256");
  Require(key != nullptr, "EVP_EC_gen");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial.fetch_add(1));
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* subject = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("pscluster"), -1, -1, 0);
  if (!role.empty()) {
    X509_NAME_add_entry_by_txt(subject, "OU", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(role.c_str()), -1, -1, 0);
  }
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509* issuer = ca != nullptr ? CertOf(ca->cert) : cert;
  EVP_PKEY* signer = ca != nullptr ? KeyOf(ca->key) : key;
  X509_set_issuer_name(cert, X509_get_subject_name(issuer));
  if (ca == nullptr) {
    AddExtension(cert, issuer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert, issuer, NID_key_usage, "critical,keyCertSign,cRLSign");
    AddExtension(cert, issuer, NID_subject_key_identifier, "hash");
  } else {
    AddExtension(cert, issuer, NID_basic_constraints, "CA:FALSE");
    AddExtension(cert, issuer, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    AddExtension(cert, issuer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  Require(X509_sign(cert, signer, EVP_sha256()) > 0, "X509_sign");
  TestCert out{ToPem(cert), ToPem(key)};
  if (ca != nullptr) {
    X509_free(issuer);
    EVP_PKEY_free(signer);
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

}  // namespace

TestCert MakeTestCa(const std::string& name) { return Make(nullptr, name, ""); }

TestCert MakeTestCert(const TestCert& ca, const std::string& name, const std::string& role) {
  return Make(&ca, name, role);
}

TlsPem TestPem(const TestCert& ca, const TestCert& leaf) {
  return TlsPem{leaf.cert, leaf.key, ca.cert};
}

}  // namespace pscluster
