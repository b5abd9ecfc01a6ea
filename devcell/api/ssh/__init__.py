"""SSH to a cell with no sshd in its image (`devcell ssh`, `devcell ssh-config`).

OpenSSH's client runs `devcell ssh-proxy CELL` as its ProxyCommand; that process speaks the
SSH protocol itself (asyncssh) over its standard input and output and maps what the client
asks for onto the cell's backend: sessions onto `exec` (sessions.py), the sftp subsystem onto
the cell's own files (sftp.py), and TCP forwards onto its network (tunnels.py). Nothing
listens on a port: whoever can run the ProxyCommand already holds the state directory.
"""

import warnings

# asyncssh names cryptography's DSA classes at import, and cryptography 51 warns about them on
# stderr, which is the OpenSSH client's terminal here: DevCell offers no DSA keys, so the
# warning says nothing to the user.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
