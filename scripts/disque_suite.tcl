# Conveyor's driver for Disque's cluster test suite (scripts/disque_suite.py runs it from
# a scratch copy of Disque's tests/, where src/disque-server is the server under test).
#
# Disque's framework spawns the instances and its units run unchanged; only the
# bookkeeping is ours. A block that fails is counted and the run goes on with the next
# block: Disque's own harness skips the rest of a unit after an assertion and stops the
# whole run on any other error, which would leave every later block uncounted.

cd tests/cluster
source cluster.tcl
source ../instances.tcl            ;# changes into tests/cluster/tmp
source ../../support/cluster.tcl

set ::instances_count 7
set ::blocks_ok 0
set ::blocks_failed {}
set ::unit {}

proc test {descr code} {
    set ts [clock format [clock seconds] -format %H:%M:%S]
    puts -nonewline "$ts> $descr: "
    flush stdout
    if {[catch {uplevel 1 $code} error]} {
        puts "FAILED: [lindex [split $error "\n"] 0]"
        lappend ::blocks_failed "$::unit: $descr"
        # What a failed block may have left for the next ones: the OOM blocks of
        # 02-jobs-replication set maxmemory 3mb and restore it only when they pass.
        foreach_disque_id id { catch {D $id CONFIG SET maxmemory 0} }
    } else {
        puts "OK"
        incr ::blocks_ok
    }
}

proc run_tests {} {
    foreach test [lsort [glob ../tests/*.tcl]] {
        if {$::run_matching ne {} && ![string match $::run_matching $test]} continue
        set ::unit [file tail $test]
        puts "Testing unit: $::unit"
        if {[catch {source $test} error]} {
            puts "UNIT STOPPED: [lindex [split $error "\n"] 0]"
            lappend ::blocks_failed "$::unit: stopped outside a block"
        }
    }
}

if {[catch {
    parse_options
    spawn_instance disque $::disque_base_port $::instances_count {"loglevel notice"}
    run_tests
} error]} {
    puts "RUN STOPPED: $error"
    cleanup
    exit 2
}
cleanup
puts "BLOCKS: ok $::blocks_ok failed [llength $::blocks_failed]"
foreach failed $::blocks_failed {
    puts "FAILED BLOCK: $failed"
}
