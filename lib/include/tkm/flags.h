/*
 * flags.h - the command line of the three daemons (tkm-controller, tkm-agent,
 * tkm-csi): one parser, one duration and size grammar, the same logging flags
 * and a --help generated from the same table the parser reads.
 *
 * A daemon describes its flags in a static table of struct tkm_flag and hands
 * argv to tkm_flags_parse(). Every flag is `--name VALUE` or `--name=VALUE`
 * (a bool: `--name`, `--name=true|false`). Every daemon also takes, without
 * a table row:
 *   -v LEVEL            0 info (the default), 1 debug, 2+ trace; or a name:
 *                       error, warn, info, debug, trace
 *   --log-format FMT    text (the default) or json: one JSON object a line
 *                       (log.h shows both)
 *   -h, --help          the generated text (flags, defaults, examples)
 *
 * Grammar, the same for every flag of every daemon:
 *   duration  one or more <integer><unit>, unit ms, s, m or h: 500ms, 10s, 5m,
 *             1h, 1m30s; "0" alone is zero
 *   size      <integer> bytes, or with Ki Mi Gi Ti (1024^n) or K M G (1000^n):
 *             10Gi, 500Mi, 1000000
 *
 * Deprecated spellings (accepted for one release, each noted once): a
 * duration written as a bare number is read in the unit the flag used to
 * take (tkm_flag.bare_ms; seconds for most, ms for some); the logging flags
 * of earlier releases: -v without a level (tkm-csi's: one more level),
 * --verbose, --log-level LEVEL, --zap-log-level LEVEL (as -v LEVEL),
 * --log-json (as --log-format json). The notes are kept in the flag set;
 * tkm_flags_log_init() logs one warning line for each once logging is set up.
 *
 * Ownership: the table, the set's texts and every string value are borrowed
 * (a string flag's value points into argv); nothing here allocates.
 */
#ifndef TKM_FLAGS_H
#define TKM_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include <tkm/err.h>
#include <tkm/log.h>

enum tkm_flag_type {
    TKM_FLAG_STRING,   /* const char **: the value as given (borrowed from argv) */
    TKM_FLAG_BOOL,     /* int *: --name is 1, --name=false 0 */
    TKM_FLAG_DURATION, /* uint64_t *: milliseconds, within [min, max] */
    TKM_FLAG_SIZE,     /* uint64_t *: bytes, within [min, max] */
    TKM_FLAG_UINT,     /* uint64_t *: a number within [min, max] */
    TKM_FLAG_CHOICE,   /* const char **: one of choices ("json|yaml") */
    TKM_FLAG_FUNC,     /* set(value, dst, err): anything else (a repeatable flag) */
};

struct tkm_flag {
    const char *name; /* without the dashes: "kubeconfig"; one letter for a short flag: "o" */
    enum tkm_flag_type type;
    void *dst;
    const char *arg;     /* the value's name in --help: "PATH", "DURATION" (bools: NULL) */
    const char *def;     /* the default as --help shows it, NULL when there is none */
    const char *help;    /* what it does; '\n' starts another line */
    uint64_t min, max;   /* DURATION (ms), SIZE, UINT: the accepted range; max 0 = no bound */
    uint64_t bare_ms;    /* DURATION: the unit of a bare number (deprecated), 0 = refused */
    const char *choices; /* CHOICE: "text|json" */
    const char *alias;   /* a one-letter second name: "o" for --output */
    int (*set)(const char *value, void *dst, struct tkm_err *err); /* FUNC: 0 or -EINVAL */
};

#define TKM_FLAGS_MAX_NOTES 8

struct tkm_flagset {
    /* set by the daemon */
    const char *prog;     /* "tkm-agent" */
    const char *synopsis; /* the lines after "Usage: " ("tkm-agent [flags]\n...") */
    const char *about;    /* paragraphs before the flags */
    const struct tkm_flag *flags;
    unsigned n_flags;
    const char *epilogue; /* after the flags: examples, exit status, signals */
    /* filled by tkm_flags_parse() */
    int verbosity;                        /* -v N, and each deprecated bare -v */
    int level;                            /* -v NAME: the level itself; -1 when none was given */
    const char *log_format;               /* "text" or "json" */
    char notes[TKM_FLAGS_MAX_NOTES][200]; /* the deprecation notes */
    unsigned n_notes;
};

/* Parses argv[1..argc) into the table's destinations (what is not given keeps
 * the value the caller set). Returns 0; 1 when --help was printed to stdout
 * (exit 0); -EINVAL after printing "prog: --flag VALUE: why (see prog --help)"
 * to stderr (exit 2). Positional arguments are refused. */
int tkm_flags_parse(struct tkm_flagset *fs, int argc, char **argv);
/* The help text: usage, about, every flag with its default, the logging
 * flags, the grammar, the deprecated spellings, the epilogue. */
void tkm_flags_usage(const struct tkm_flagset *fs, FILE *f);
/* The log level the flags ask for: -v NAME as given, else base + -v N
 * (capped at trace). base is the daemon's default (info; warn for the
 * agent's --once). */
enum tkm_log_level tkm_flags_log_level(const struct tkm_flagset *fs, enum tkm_log_level base);
/* tkm_log_init(prog, tkm_flags_log_level(fs, base), --log-format json), then
 * one warning line for each deprecation note. */
void tkm_flags_log_init(struct tkm_flagset *fs, enum tkm_log_level base);

/* The grammar on its own (strings borrowed). 0, -EINVAL (not one: a bare
 * number other than 0 included), -ERANGE (does not fit 64 bits). */
int tkm_parse_duration(const char *s, uint64_t *ms);
int tkm_parse_size(const char *s, uint64_t *bytes);

#endif
