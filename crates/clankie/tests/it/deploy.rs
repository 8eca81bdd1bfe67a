//! Every deploy rule over every overlay's rendered output (issue 72): filled in by the deploy work.
