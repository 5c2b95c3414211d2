/* Stand-in for libcrypto.so.3 in the device bundle (cmake/PetsDeviceBundle.cmake): HDF5's S3
 * request signing, unused by pets. Each function fails (no digest). */
#include <stddef.h>
const void* EVP_sha256(void) { return NULL; }
unsigned char* HMAC(const void* md, const void* key, int key_len, const unsigned char* d, size_t n,
                    unsigned char* out, unsigned int* out_len) {
  (void)md;
  (void)key;
  (void)key_len;
  (void)d;
  (void)n;
  (void)out;
  (void)out_len;
  return NULL;
}
unsigned char* SHA256(const unsigned char* d, size_t n, unsigned char* out) {
  (void)d;
  (void)n;
  (void)out;
  return NULL;
}
