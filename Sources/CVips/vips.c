#include "CVips.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// The few libvips and GLib declarations used, as libvips 8.x defines them (vips/vips.h): the
// headers are not needed to build, only the library to run.
typedef struct _VipsImage VipsImage;
typedef struct _VipsArea VipsArea;
enum { VIPS_SIZE_DOWN = 2, VIPS_FORMAT_UCHAR = 0 };

static struct {
    int (*init)(const char *argv0);
    const char *(*version_string)(void);
    void (*block_untrusted_set)(int state);
    void (*cache_set_max)(int max);
    void (*concurrency_set)(int concurrency);
    const char *(*error_buffer)(void);
    void (*error_clear)(void);
    void (*g_free)(void *memory);
    void (*g_object_unref)(void *object);
    int (*image_hasalpha)(VipsImage *image);
    VipsArea *(*array_double_newv)(int n, ...);
    void (*area_unref)(VipsArea *area);
    int (*flatten)(VipsImage *in, VipsImage **out, ...);
    int (*jpegsave_buffer)(VipsImage *in, void **buf, size_t *len, ...);
    int (*thumbnail_buffer)(void *buf, size_t len, VipsImage **out, int width, ...);
    VipsImage *(*image_new_from_memory)(const void *data, size_t size, int width, int height, int bands, int format);
    VipsImage *(*image_new_from_buffer)(const void *buf, size_t len, const char *option_string, ...);
    int (*image_get_width)(const VipsImage *image);
    int (*image_get_height)(const VipsImage *image);
} vips;

static int started = 0;
static char load_error[512];

int parley_vips_start(void) {
    if (started) return 0;
    void *library = dlopen("libvips.so.42", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(load_error, sizeof load_error, "libvips is not installed (Debian: libvips42): %s", dlerror());
        return -1;
    }
    // dlsym on the library's handle also finds what its own dependencies (GLib, GObject) define.
#define FIND(field, symbol) \
    if ((*(void **)&vips.field = dlsym(library, symbol)) == NULL) { \
        snprintf(load_error, sizeof load_error, "libvips has no %s: not the 8.x series", symbol); \
        return -1; \
    }
    FIND(init, "vips_init")
    FIND(version_string, "vips_version_string")
    FIND(block_untrusted_set, "vips_block_untrusted_set")
    FIND(cache_set_max, "vips_cache_set_max")
    FIND(concurrency_set, "vips_concurrency_set")
    FIND(error_buffer, "vips_error_buffer")
    FIND(error_clear, "vips_error_clear")
    FIND(g_free, "g_free")
    FIND(g_object_unref, "g_object_unref")
    FIND(image_hasalpha, "vips_image_hasalpha")
    FIND(array_double_newv, "vips_array_double_newv")
    FIND(area_unref, "vips_area_unref")
    FIND(flatten, "vips_flatten")
    FIND(jpegsave_buffer, "vips_jpegsave_buffer")
    FIND(thumbnail_buffer, "vips_thumbnail_buffer")
    FIND(image_new_from_memory, "vips_image_new_from_memory")
    FIND(image_new_from_buffer, "vips_image_new_from_buffer")
    FIND(image_get_width, "vips_image_get_width")
    FIND(image_get_height, "vips_image_get_height")
#undef FIND
    if (vips.init("parley") != 0) {
        snprintf(load_error, sizeof load_error, "libvips did not start: %s", vips.error_buffer());
        vips.error_clear();
        return -1;
    }
    vips.block_untrusted_set(1);
    vips.cache_set_max(0);
    vips.concurrency_set(1);
    started = 1;
    return 0;
}

const char *parley_vips_version(void) {
    return started ? vips.version_string() : "";
}

void parley_vips_error(char *buffer, size_t length) {
    if (length == 0) return;
    const char *text = started ? vips.error_buffer() : load_error;
    strncpy(buffer, text, length - 1);
    buffer[length - 1] = 0;
    if (started) vips.error_clear();
}

void parley_vips_free(void *bytes) {
    if (started) vips.g_free(bytes);
}

// Saves `image` as a JPEG of `quality` without metadata into *out; an image with transparency is
// put on white first. Takes `image`.
static int save_jpeg(VipsImage *image, int quality, void **out, size_t *out_length) {
    if (vips.image_hasalpha(image)) {
        VipsArea *white = vips.array_double_newv(1, 255.0);
        VipsImage *flat = NULL;
        int failed = vips.flatten(image, &flat, "background", white, NULL);
        vips.area_unref(white);
        vips.g_object_unref(image);
        if (failed) return -1;
        image = flat;
    }
    int failed = vips.jpegsave_buffer(image, out, out_length, "Q", quality, "strip", 1, "optimize_coding", 1, NULL);
    vips.g_object_unref(image);
    return failed ? -1 : 0;
}

int parley_vips_thumbnail_jpeg(const void *bytes, size_t length, int size, int quality, long long pixels_max, void **out, size_t *out_length) {
    if (!started) return -1;
    // The header only (libvips opens lazily): its size, before anything is decoded.
    VipsImage *header = vips.image_new_from_buffer(bytes, length, "", NULL);
    if (header == NULL) return -1;
    long long pixels = (long long)vips.image_get_width(header) * (long long)vips.image_get_height(header);
    vips.g_object_unref(header);
    if (pixels <= 0 || pixels > pixels_max) return -2;
    VipsImage *thumbnail = NULL;
    if (vips.thumbnail_buffer((void *)bytes, length, &thumbnail, size, "height", size, "size", VIPS_SIZE_DOWN, NULL)) return -1;
    return save_jpeg(thumbnail, quality, out, out_length);
}

int parley_vips_jpeg_from_rgb(const unsigned char *pixels, int width, int height, int quality, void **out, size_t *out_length) {
    if (!started) return -1;
    VipsImage *image = vips.image_new_from_memory(pixels, (size_t)width * height * 3, width, height, 3, VIPS_FORMAT_UCHAR);
    if (image == NULL) return -1;
    return save_jpeg(image, quality, out, out_length);
}
