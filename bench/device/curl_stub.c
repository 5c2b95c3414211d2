/* Stand-in for libcurl.so.4 in the device bundle (cmake/PetsDeviceBundle.cmake): HDF5's read-only
 * S3 driver links libcurl, unused by pets, which reads local files only. Each function fails. */
#include <stddef.h>
int curl_global_init(long flags) {
  (void)flags;
  return 2; /* CURLE_FAILED_INIT */
}
void curl_global_cleanup(void) {}
void* curl_easy_init(void) { return NULL; }
int curl_easy_setopt(void* h, int option, ...) {
  (void)h;
  (void)option;
  return 2;
}
int curl_easy_perform(void* h) {
  (void)h;
  return 2;
}
void curl_easy_cleanup(void* h) { (void)h; }
void* curl_slist_append(void* list, const char* s) {
  (void)list;
  (void)s;
  return NULL;
}
void curl_slist_free_all(void* list) { (void)list; }
