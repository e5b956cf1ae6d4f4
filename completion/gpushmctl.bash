# SPDX-License-Identifier: MIT
# bash completion for gpushmctl(1), installed as .../bash-completion/completions/gpushmctl:
# its commands, each command's options as 'gpushmctl COMMAND --help' lists them
# (tests/integration/test-completion.sh fails when the two differ), option values, and
# buffer names from 'gpushmctl list --json'.  Plain bash: no bash-completion helpers.

# Names of the buffers the user sees.  Names are [A-Za-z0-9._-] only; the top-level
# objects start with {"name": (holders and images have no name, metadata is a string).
_gpushmctl_buffers()
{
    "$1" ${2:+--socket "$2"} list --json 2>/dev/null |
        grep -o '{"name":"[^"]*"' | sed 's/^{"name":"//; s/"$//'
}

_gpushmctl()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local commands="list show clients stats create create-image unlink destroy disconnect events dump wait ping version doctor"
    local backends="host cuda-ipc cuda-fd cuda-fabric"
    local formats="r8-unorm rg8-unorm rgba8-unorm rgba8-srgb bgra8-unorm r16-unorm rgba16-unorm r16-sfloat rg16-sfloat rgba16-sfloat r32-sfloat rg32-sfloat rgba32-sfloat r32-uint rgba32-uint rgb10a2-unorm d32-sfloat"
    local cmd="" socket="" opts="" word i args=0

    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        case $word in
            -s|--socket) ((i++)); socket=${COMP_WORDS[i]} ;;
            --socket=*) socket=${word#--socket=} ;;
            --) ;;
            -*) ;;
            *)
                if [[ -z $cmd ]]; then
                    cmd=$word
                    continue
                fi
                # an option's value is not an argument
                case ${COMP_WORDS[i-1]} in
                    --device|--mode|--group|--backend|--metadata|--format|--textfile|--offset|--length|--timeout) ;;
                    *) ((args++)) ;;
                esac
                ;;
        esac
    done

    case $prev in
        -s|--socket|--textfile)
            COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --backend)
            [[ $cmd == doctor ]] && backends="host cuda-ipc cuda-fd"
            COMPREPLY=($(compgen -W "$backends" -- "$cur"))
            return ;;
        --format)
            if [[ $cmd == dump ]]; then
                COMPREPLY=($(compgen -W "hex raw" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$formats" -- "$cur"))
            fi
            return ;;
        --group)
            COMPREPLY=($(compgen -g -- "$cur"))
            return ;;
        --device|--mode|--metadata|--offset|--length|--timeout)
            return ;;
    esac

    case $cmd in
        "")
            COMPREPLY=($(compgen -W "--socket --help --version $commands" -- "$cur"))
            return ;;
        list) opts="--all --json --bytes" ;;
        show) opts="--all --json --bytes" ;;
        clients) opts="--json --bytes" ;;
        stats) opts="--json --prometheus --bytes --textfile" ;;
        create) opts="--device --mode --group --session --backend --sync --metadata --strict-mode" ;;
        create-image) opts="--device --mode --session --backend --format" ;;
        unlink|destroy) opts="" ;;
        disconnect) opts="" ;;
        events) opts="--all --json" ;;
        dump) opts="--offset --length --format" ;;
        wait) opts="--timeout" ;;
        ping) opts="" ;;
        version) opts="" ;;
        doctor) opts="--backend" ;;
        *) return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts --help --socket" -- "$cur"))
        return
    fi
    case $cmd in
        show|dump|unlink|destroy)
            ((args == 0)) &&
                COMPREPLY=($(compgen -W "$(_gpushmctl_buffers "${COMP_WORDS[0]}" "$socket")" -- "$cur"))
            ;;
    esac
}
complete -F _gpushmctl gpushmctl
