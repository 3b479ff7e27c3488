/* chaos place, control: the planted program (place_last_byte_flag.c)
 * under plain `rdmasan run`: softnic places each message at once, in
 * ascending order (across processes, process_vm_writev copies it so), so
 * the reader never sees the last byte before the rest and the run is
 * silent.  The bug shows only under --chaos=place. */
// SILENT
// STATUS: 0
#include "place_last_byte_flag.c"
