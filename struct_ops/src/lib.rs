//! bloatd-cc: loader for the bloatd_westwood and bloatd_cubic struct_ops (work in progress).
