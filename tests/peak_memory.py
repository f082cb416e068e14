"""Memory of code run in a fresh interpreter: source the child runs to read its own.

The peak is /proc/self/status's VmHWM, not getrusage's ru_maxrss: Linux carries the parent's
peak RSS over exec into the child's ru_maxrss, so a pytest worker that had grown to 418 MiB made
every child "peak" there.
"""

# Prepended to a child's code: resident_bytes("VmRSS") is what it holds now, resident_bytes("VmHWM")
# its peak; restart_peak() makes the peak start again from now.
PEAK_MEMORY_SOURCE = '''
def resident_bytes(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024


def restart_peak():
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
'''
