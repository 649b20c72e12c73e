#!/usr/bin/env bash
# Placeholder until the control-plane build lands (issue 6): nothing to build yet.
exit 0
