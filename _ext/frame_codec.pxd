# The call frames of a CALLS frame, split per method in C (frame_codec.pyx): shared with the framed
# carrier's reader (wire_codec.pyx), which checks a frame's calls and splits them in one pass.
from libc.stdint cimport uint8_t

# [(method, [ids], [requests]), ...] of the call frames in b[:end], per method in order of first
# appearance; MalformedFrames when they do not split exactly.
cdef list split_call_frames(const uint8_t* b, Py_ssize_t end)
