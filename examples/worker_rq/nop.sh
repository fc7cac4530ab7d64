#!/bin/bash
# test_nop: does nothing, successfully.
echo "done nop" >&$RQ_WRITE
