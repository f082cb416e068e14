/* Shared by the native module's two files: the Arrow C data interface and the Writer's entry. */
#ifndef TOPICVAULT_KAFKA_ARROW_H
#define TOPICVAULT_KAFKA_ARROW_H

#include <Python.h>
#include <librdkafka/rdkafka.h>
#include <stdint.h>

/* The Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html): plain
   struct ABIs, stable since Arrow 1.0. */
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* A librdkafka configuration of every (str, str) item of the dict `config`: NULL with ValueError
   naming what librdkafka rejected (or the exception a non-str item raised). */
rd_kafka_conf_t *conf_from_dict(PyObject *config);

/* Adds the Writer type (_kafka_arrow_writer.c) to the module; -1 with an exception set. */
int add_writer_type(PyObject *module);

#endif
