/* The pieces every restartable sequence (rseq) of the lab's C programs shares, x86-64 inline
 * assembly for GCC's asm goto:
 *
 *   RSEQ_SEQ_BEGIN  the sequence's descriptor (in section __rseq_cs: start, the length up to
 *                   the end of its committing instruction, the abort handler), the store of
 *                   its address into the thread's rseq area, and the start label;
 *   RSEQ_SEQ_END    the end label, and the abort handler (in section __rseq_failure, after the
 *                   signature glibc registers on x86), which jumps to the C label `aborted`.
 *
 * Between them goes the sequence: anything that may run again, then one committing store. The
 * asm statement must name operands [rseq_cs] (the thread's rseq_cs field), clobber rax, and
 * list `aborted` among its labels. The kernel moves a thread that was preempted, migrated or
 * signalled inside the sequence to the abort handler. */
#ifndef VMARENA_LAB_RSEQ_SEQ_H
#define VMARENA_LAB_RSEQ_SEQ_H
#include <sys/rseq.h>

#define RSEQ_SEQ_BEGIN                                                                          \
    ".pushsection __rseq_cs, \"aw\"\n\t"                                                        \
    ".balign 32\n\t"                                                                            \
    "3:\n\t"                                                                                    \
    ".long 0, 0\n\t"              /* version, flags */                                          \
    ".quad 1f, (2f - 1f), 4f\n\t" /* start, length up to the commit's end, abort */             \
    ".popsection\n\t"                                                                           \
    "leaq 3b(%%rip), %%rax\n\t"                                                                 \
    "movq %%rax, %[rseq_cs]\n\t"                                                                \
    "1:\n\t"

#define RSEQ_SEQ_END                                                                            \
    "2:\n\t"                                                                                    \
    ".pushsection __rseq_failure, \"ax\"\n\t"                                                   \
    ".long 0x53053053\n\t" /* RSEQ_SIG, as glibc registers it on x86 */                         \
    "4:\n\t"                                                                                    \
    "jmp %l[aborted]\n\t"                                                                       \
    ".popsection\n\t"

/* rax = [base] + [cpu_id] x [stride]: this CPU's copy of a per-CPU array (operands [cpu_id],
 * the thread's rseq cpu_id field, [stride] and [base]; inside a sequence, so that a migration
 * restarts it). */
#define RSEQ_THIS_CPU_RAX                                                                       \
    "movl %[cpu_id], %%eax\n\t"                                                                \
    "imulq %[stride], %%rax\n\t"                                                               \
    "addq %[base], %%rax\n\t"

/* This thread's rseq area, which glibc registered (2.35 on; __rseq_size is 0 without one). */
static inline struct rseq *rseq_area(void) {
    return (struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);
}
#endif
